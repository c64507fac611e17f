// Encoding helpers of the store's wire format (store_protocol.h).
#include "engine/launch/store_protocol.h"

#include <time.h>

namespace shardscope::engine::launch::protocol {

std::string frame(Type type, const std::string& payload) {
  if (payload.size() > kMaxPayload) {
    throw LaunchError("store message of " + std::to_string(payload.size()) +
                      " bytes is over the limit of " + std::to_string(kMaxPayload) + " bytes");
  }
  std::string out;
  out.reserve(kHeaderBytes + payload.size());
  put_u32(out, kMagic);
  const auto version = kVersion;
  out.push_back(static_cast<char>(version & 0xFF));
  out.push_back(static_cast<char>(version >> 8));
  const auto t = static_cast<uint16_t>(type);
  out.push_back(static_cast<char>(t & 0xFF));
  out.push_back(static_cast<char>(t >> 8));
  put_u32(out, static_cast<uint32_t>(payload.size()));
  out += payload;
  return out;
}

Header decode_header(const unsigned char* bytes) {
  Header h;
  h.magic = static_cast<uint32_t>(get_le(bytes, 4));
  h.version = static_cast<uint16_t>(get_le(bytes + 4, 2));
  h.type = static_cast<Type>(get_le(bytes + 6, 2));
  h.length = static_cast<uint32_t>(get_le(bytes + 8, 4));
  return h;
}

bool is_request(Type t) {
  const auto v = static_cast<uint16_t>(t);
  return v >= static_cast<uint16_t>(Type::kHello) && v <= static_cast<uint16_t>(Type::kClock);
}

std::string header_problem(const Header& h) {
  if (h.magic != kMagic) return "bad magic";
  if (h.version != kVersion) {
    return "protocol version " + std::to_string(h.version) + ", this side speaks " +
           std::to_string(kVersion);
  }
  if (h.length > kMaxPayload) {
    return "message of " + std::to_string(h.length) + " bytes is over the limit of " +
           std::to_string(kMaxPayload);
  }
  return {};
}

std::string Reader::str(size_t max_bytes) {
  if (data_.size() - at_ < 4) throw Malformed("store message: truncated string length");
  const uint64_t n = get_le(reinterpret_cast<const unsigned char*>(data_.data()) + at_, 4);
  at_ += 4;
  if (n > max_bytes) {
    throw Malformed("store message: string of " + std::to_string(n) + " bytes over the limit of " +
                    std::to_string(max_bytes));
  }
  if (data_.size() - at_ < n) throw Malformed("store message: truncated string");
  std::string s = data_.substr(at_, n);
  at_ += n;
  return s;
}

int64_t Reader::i64() {
  if (data_.size() - at_ < 8) throw Malformed("store message: truncated integer");
  const uint64_t u = get_le(reinterpret_cast<const unsigned char*>(data_.data()) + at_, 8);
  at_ += 8;
  return static_cast<int64_t>(u);
}

uint8_t Reader::u8() {
  if (data_.size() - at_ < 1) throw Malformed("store message: truncated byte");
  return static_cast<uint8_t>(data_[at_++]);
}

void Reader::finish() const {
  if (at_ != data_.size()) {
    throw Malformed("store message: " + std::to_string(data_.size() - at_) + " trailing bytes");
  }
}

int64_t monotonic_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

std::string endpoint(const std::string& addr, int port) {
  return addr + ":" + std::to_string(port);
}

}  // namespace shardscope::engine::launch::protocol
