// Numbers for people, shared by the CLI's tables, `shardscope report` and the
// GUI's labels.
#pragma once

#include <string>

namespace shardscope::traces {

// The largest unit human_bytes may use.
enum class ByteUnit { kib = 1, mib = 2, gib = 3, tib = 4, pib = 5 };

// "12 B", "1.50 KiB", "3.73 MiB", "80.00 GiB": whole bytes below 1 KiB, else
// two decimals in the first binary unit that brings |bytes| below 1024, up to
// `largest` (where larger values stay in `largest`: "2048.00 TiB"). The CLI
// and `report` stop at TiB, the GUI at PiB.
std::string human_bytes(double bytes, ByteUnit largest);

}  // namespace shardscope::traces
