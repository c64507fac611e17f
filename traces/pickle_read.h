// A reader of Python pickles that holds plain data only: dict, list, tuple,
// str, bytes, int (64-bit), float, bool and None (what
// torch.cuda.memory._dump_snapshot writes). It never imports or calls
// anything: every opcode that names a global, builds an object or reaches
// outside the stream (GLOBAL, STACK_GLOBAL, REDUCE, BUILD, INST, OBJ,
// NEWOBJ, NEWOBJ_EX, EXT1/2/4, PERSID, BINPERSID, the out-of-band buffers)
// is refused, naming the opcode and its byte offset. docs/traces.md,
// "Memory snapshots".
//
// Bounded: the file size, the number of values, the bytes of text and the
// nesting depth are capped (PickleLimits). A memo reference (BINGET) shares
// the value memoized, as Python does, so a value may be reached many times:
// readers of a Document bound what they walk (SnapshotLimits::max_entries).
// A structure that contains itself is refused: CPython's pickler writes a
// container whole before any memo reference to it, so a container changed
// after one (APPEND into a list a BINGET referenced) is recursive. Hence
// the nodes form a DAG without cycles, and a node's depth is final.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace shardscope::traces::pickle {

enum class Kind : uint8_t { none, boolean, integer, real, str, bytes, list, tuple, dict };
const char* kind_name(Kind kind);  // "None", "bool", "int", "float", "str", "bytes", ...

struct PickleLimits {
  uint64_t max_file_bytes = uint64_t{1} << 30;  // the whole pickle
  uint64_t max_values = uint64_t{32} << 20;     // values made (80 bytes each, + text)
  uint64_t max_text_bytes = uint64_t{1} << 30;  // str and bytes
  uint32_t max_depth = 64;                      // nesting of containers (at most 255)
  uint32_t max_marks = 1024;                    // open MARKs at once
};

// The values of one pickle, each a node; containers hold the ids of their
// items (a dict: key, value, key, value...). A node referenced through the
// memo is an item of several containers (a DAG, never a cycle).
class Document {
 public:
  struct Node {
    Kind kind = Kind::none;
    uint8_t depth = 0;    // 0 for scalars, 1 + the deepest item for containers
    int64_t integer = 0;  // int, and bool (0 or 1)
    double real = 0;
    std::string text;             // str (UTF-8 as written) or bytes
    std::vector<uint32_t> items;  // list, tuple: elements; dict: key, value pairs
  };

  uint32_t root() const { return root_; }
  const Node& node(uint32_t id) const { return nodes_[id]; }
  size_t size() const { return nodes_.size(); }

  // The value of dict `dict` under the str key `key`; nullptr when absent
  // (the last one wins when a key repeats, as in Python).
  const Node* find(const Node& dict, std::string_view key) const;

 private:
  friend class Reader;
  std::vector<Node> nodes_;
  uint32_t root_ = 0;
};

// Parses a whole pickle (protocols 0-5 framing, binary opcodes). Throws
// TraceError(malformed | truncated | schema) with position "byte N" (the
// opcode's offset) naming the opcode: `file` names the input in messages.
Document read_pickle(std::string_view bytes, const std::string& file = "pickle",
                     const PickleLimits& limits = {});

// The name of a pickle opcode ("GLOBAL", "SHORT_BINUNICODE"), or "" when the
// byte is no opcode.
const char* opcode_name(uint8_t opcode);

}  // namespace shardscope::traces::pickle
