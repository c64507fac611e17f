#include "io/output_stream.h"

#include "io/output_error.h"

namespace shardscope::io {

OutputStream::OutputStream(const std::string& path, OutputOptions options)
    : std::ostream(nullptr), file_(path, options), buffer_(file_) {
  rdbuf(&buffer_);
}

OutputStream::~OutputStream() = default;

OutputStream::Buffer::int_type OutputStream::Buffer::overflow(int_type c) {
  if (traits_type::eq_int_type(c, traits_type::eof())) return traits_type::not_eof(c);
  const char ch = traits_type::to_char_type(c);
  return xsputn(&ch, 1) == 1 ? c : traits_type::eof();
}

std::streamsize OutputStream::Buffer::xsputn(const char* s, std::streamsize n) {
  if (error) return 0;
  try {
    file_.write(s, static_cast<size_t>(n));
    return n;
  } catch (...) {
    error = std::current_exception();
    return 0;
  }
}

void OutputStream::commit() {
  flush();
  if (buffer_.error) std::rethrow_exception(buffer_.error);
  if (!good()) throw OutputWriteError(file_.path(), "the stream failed while writing");
  file_.commit();
}

}  // namespace shardscope::io
