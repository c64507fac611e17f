#include "traces/file_io.h"

#include <unistd.h>

#include <sys/stat.h>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <cstring>

#include "traces/error.h"
#include "traces/gzip.h"
#include "traces/input.h"
#include "traces/utf8.h"

namespace shardscope::traces {

namespace {

std::string errno_text() {
  return std::strerror(errno);
}

// A trace, an export or an import is reproduced by running its command
// again: atomic for its readers, but not fsynced (io/atomic_file.h says what
// that risks on a crash; checkpoints are the files that need fsync).
io::OutputOptions trace_output_options() {
  io::OutputOptions options;
  options.durability = io::Durability::rename_only;
  return options;
}

}  // namespace

std::string read_file(const std::string& path) {
  InputFile in(path, InputLimits());
  std::string data;
  if (!in.gzip() && in.file_size()) data.reserve(in.file_size());
  while (in.read(data, size_t{1} << 20) > 0) {
  }
  return data;
}

uint64_t file_size_of(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0)
    throw TraceError(ErrorKind::io, path, "", "cannot stat: " + errno_text());
  if (!S_ISREG(st.st_mode)) throw TraceError(ErrorKind::io, path, "", "not a regular file");
  return static_cast<uint64_t>(st.st_size);
}

OutputFile::OutputFile(const std::string& path) : file_(path, trace_output_options()) {
  if (path.size() > 3 && path.compare(path.size() - 3, 3, ".gz") == 0)
    gzip_ = std::make_unique<GzipDeflater>();
}

OutputFile::~OutputFile() = default;

void OutputFile::write(const void* data, size_t n) {
  if (!gzip_) {
    file_.write(data, n);
    return;
  }
  compressed_.clear();
  gzip_->write(data, n, compressed_);
  file_.write(compressed_.data(), compressed_.size());
}

void OutputFile::commit() {
  if (gzip_) {
    compressed_.clear();
    gzip_->finish(compressed_);
    file_.write(compressed_.data(), compressed_.size());
    gzip_.reset();
  }
  file_.commit();
}

void OutputFile::abandon() noexcept {
  file_.abandon();
}

void OutBuffer::drain() {
  if (buf_.empty()) return;
  if (file_) {
    file_->write(buf_.data(), buf_.size());
  } else if (target_) {
    target_->append(buf_);
  }
  buf_.clear();
}

void OutBuffer::put_int(int64_t v) {
  char tmp[24];
  auto res = std::to_chars(tmp, tmp + sizeof tmp, v);
  put(std::string_view(tmp, static_cast<size_t>(res.ptr - tmp)));
}

void OutBuffer::put_uint(uint64_t v) {
  char tmp[24];
  auto res = std::to_chars(tmp, tmp + sizeof tmp, v);
  put(std::string_view(tmp, static_cast<size_t>(res.ptr - tmp)));
}

void OutBuffer::put_micros(int64_t ns) {
  // Split in unsigned arithmetic: -INT64_MIN does not fit an int64_t.
  const bool negative = ns < 0;
  const uint64_t mag = negative ? 0 - static_cast<uint64_t>(ns) : static_cast<uint64_t>(ns);
  if (negative) put('-');
  put_micros_unsigned(mag);
}

void OutBuffer::put_micros_unsigned(uint64_t mag) {
  put_uint(mag / 1000);
  const auto frac = static_cast<unsigned>(mag % 1000);
  char tmp[4] = {'.', static_cast<char>('0' + frac / 100), static_cast<char>('0' + frac / 10 % 10),
                 static_cast<char>('0' + frac % 10)};
  put(std::string_view(tmp, 4));
}

void OutBuffer::put_string(std::string_view s, bool blank_controls) {
  static const char kHex[] = "0123456789abcdef";
  put('"');
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\') {
      // Fast path: a run of plain ASCII.
      size_t j = i + 1;
      while (j < s.size()) {
        const auto d = static_cast<unsigned char>(s[j]);
        if (d < 0x20 || d >= 0x7f || d == '"' || d == '\\') break;
        ++j;
      }
      put(s.substr(i, j - i));
      i = j;
      continue;
    }
    if (c == '"' || c == '\\') {
      put('\\');
      put(static_cast<char>(c));
      ++i;
      continue;
    }
    if (c < 0x20 || c == 0x7f) {
      if (blank_controls) {
        put(' ');
      } else if (c == '\n') {
        put("\\n");
      } else if (c == '\t') {
        put("\\t");
      } else if (c == '\r') {
        put("\\r");
      } else {
        char esc[6] = {'\\', 'u', '0', '0', kHex[c >> 4], kHex[c & 15]};
        put(std::string_view(esc, 6));
      }
      ++i;
      continue;
    }
    const size_t n = utf8_sequence_length(s, i);
    if (n == 0) {
      put("\xef\xbf\xbd");  // U+FFFD REPLACEMENT CHARACTER
      ++i;
    } else {
      put(s.substr(i, n));
      i += n;
    }
  }
  put('"');
}

}  // namespace shardscope::traces
