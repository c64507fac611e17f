// A std::ostream over an io::OutputFile, for writers that take a stream
// (CSV and JSON of `sweep --out`). The stream itself cannot carry the file's
// exceptions: the first one is kept, the stream goes bad, and commit()
// rethrows it (OutputWriteError naming the path), so a failed write is never
// mistaken for success.
#pragma once

#include <exception>
#include <ostream>
#include <streambuf>
#include <string>

#include "io/output_file.h"

namespace shardscope::io {

class OutputStream : public std::ostream {
 public:
  explicit OutputStream(const std::string& path, OutputOptions options = {});
  ~OutputStream() override;
  // Rethrows the first write error, or puts the file in place.
  void commit();

 private:
  class Buffer : public std::streambuf {
   public:
    explicit Buffer(OutputFile& file) : file_(file) {}
    std::exception_ptr error;

   protected:
    int_type overflow(int_type c) override;
    std::streamsize xsputn(const char* s, std::streamsize n) override;

   private:
    OutputFile& file_;
  };
  OutputFile file_;
  Buffer buffer_;
};

}  // namespace shardscope::io
