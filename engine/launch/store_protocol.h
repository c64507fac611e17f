// Wire format of the TCP store (private to engine/launch).
//
// Every message is a 12-byte header then `length` payload bytes, all integers
// little-endian:
//   u32 magic = kMagic ("SSKV"), u16 version = kVersion, u16 type, u32 length
// Payload fields: str = u32 byte count + bytes; i64 = 8 bytes two's complement.
//   client -> server                       server -> client
//   kHello   str run_id, i64 world, i64 rank    kOk | kError str message (then closes)
//   kSet     str key, str value                 kOk
//   kGet     str key, u8 wait, i64 timeout_ms   kValue str | kMissing | kTimeout str message
//   kAdd     str key, i64 delta                 kInt i64 | kError str message
//   kCheck   str key                            kInt 0/1
//   kBarrier str name, i64 timeout_ms           kOk | kTimeout str message
//   kClock   (empty)                            kInt server CLOCK_MONOTONIC ns
// A client has at most one request outstanding; the server answers in order. Bad magic,
// version, type or a length over kMaxPayload ends the connection.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>

#include "engine/launch/launch.h"

namespace shardscope::engine::launch::protocol {

constexpr uint32_t kMagic = 0x564B5353;  // bytes "SSKV"
constexpr uint16_t kVersion = 1;
constexpr size_t kHeaderBytes = 12;
constexpr uint32_t kMaxPayload = 4u << 20;      // one message, bytes
constexpr size_t kMaxKeyBytes = 4096;           // keys, barrier names and run ids
constexpr size_t kMaxStoredBytes = 256u << 20;  // keys + values held by a server
constexpr size_t kMaxConnections = 1024;

enum class Type : uint16_t {
  kHello = 1,
  kSet = 2,
  kGet = 3,
  kAdd = 4,
  kCheck = 5,
  kBarrier = 6,
  kClock = 7,
  kOk = 64,
  kValue = 65,
  kMissing = 66,
  kInt = 67,
  kError = 68,
  kTimeout = 69,
};

struct Header {
  uint32_t magic = kMagic;
  uint16_t version = kVersion;
  Type type = Type::kOk;
  uint32_t length = 0;
};

inline void put_u32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}
inline void put_i64(std::string& out, int64_t v) {
  const uint64_t u = static_cast<uint64_t>(v);
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((u >> (8 * i)) & 0xFF));
}
inline void put_str(std::string& out, const std::string& s) {
  put_u32(out, static_cast<uint32_t>(s.size()));
  out += s;
}
inline uint64_t get_le(const unsigned char* p, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}

// A whole frame (header + payload). LaunchError when the payload is over kMaxPayload.
std::string frame(Type type, const std::string& payload);
// Decodes the first kHeaderBytes of `bytes`.
Header decode_header(const unsigned char* bytes);
// Empty when the header is acceptable, else why not.
std::string header_problem(const Header& h);
bool is_request(Type t);

// Reads payload fields in order; every read checks bounds and throws
// protocol::Malformed (a LaunchError) on a short or oversize field.
class Malformed : public LaunchError {
 public:
  using LaunchError::LaunchError;
};
class Reader {
 public:
  explicit Reader(const std::string& payload) : data_(payload) {}
  std::string str(size_t max_bytes);
  int64_t i64();
  uint8_t u8();
  // Malformed unless every byte was read.
  void finish() const;

 private:
  const std::string& data_;
  size_t at_ = 0;
};

int64_t monotonic_ns();
// "host:port" for messages.
std::string endpoint(const std::string& addr, int port);

}  // namespace shardscope::engine::launch::protocol
