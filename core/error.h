// seqbench::Error: the one exception type of the project.
//
// Every failure a user can cause or meet (a bad shape, an unsupported dtype, a CUDA or cuBLAS
// error, an unreadable report) is thrown as seqbench::Error. Its what() is one line,
// "folder/file:line: message", so the command line can print it as is.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace seqbench {

class Error : public std::runtime_error {
 public:
  Error(const char* file, int line, const std::string& message);

  const std::string& file() const { return file_; }
  int line() const { return line_; }
  // The message without the "file:line: " prefix.
  const std::string& message() const { return message_; }

 private:
  std::string file_;
  int line_;
  std::string message_;
};

// Keeps the last two components of a path ("kernels/layernorm.cu") so that messages stay short
// but still say which of two same-stem files (reference/ and kernels/) spoke.
std::string short_source_path(const char* file);

[[noreturn]] void throw_error(const char* file, int line, const std::string& message);

}  // namespace seqbench

// Throws seqbench::Error; the argument is a stream expression: SEQBENCH_FAIL("rows " << n << " > " << max).
#define SEQBENCH_FAIL(stream_expr)                                   \
  do {                                                               \
    std::ostringstream seqbench_os_;                                 \
    seqbench_os_ << stream_expr;                                     \
    ::seqbench::throw_error(__FILE__, __LINE__, seqbench_os_.str()); \
  } while (0)

// Argument validation: SEQBENCH_REQUIRE(hidden % heads == 0, "hidden " << hidden << " ...").
#define SEQBENCH_REQUIRE(cond, stream_expr)  \
  do {                                       \
    if (!(cond)) SEQBENCH_FAIL(stream_expr); \
  } while (0)
