// A writer of Python pickles (protocol 2) holding plain data: dicts, lists,
// str, int, float, bool and None, written as they are produced. It uses only
// opcodes that CPython's pickle and PyTorch's MemoryViz.js unpickler both
// read (PROTO, EMPTY_DICT, EMPTY_LIST, MARK, SETITEMS, APPENDS, BININT1,
// BININT2, BININT, LONG1, BINFLOAT, BINUNICODE, NEWTRUE, NEWFALSE, NONE,
// STOP), and no memo.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace shardscope::traces::pickle {

// Usage: begin_dict(); key("a"); integer(1); end_dict(); ... finish().
// A dict's items alternate key and value; nesting is the caller's to balance
// (finish() checks that everything opened was closed and one value was
// written).
class Writer {
 public:
  Writer();

  void none();
  void boolean(bool v);
  void integer(int64_t v);
  void real(double v);
  // Invalid UTF-8 is written as U+FFFD (Python decodes str as UTF-8).
  void str(std::string_view s);
  void key(std::string_view s) { str(s); }
  void begin_dict();
  void end_dict();
  void begin_list();
  void end_list();

  // Appends STOP and returns the pickle; throws std::logic_error when a
  // container is still open or the top level is not one value.
  std::string finish();

 private:
  void value_written();
  std::string out_;
  int open_ = 0;
  int top_values_ = 0;
};

}  // namespace shardscope::traces::pickle
