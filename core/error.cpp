#include "core/error.h"

#include <cstring>

namespace seqbench {

std::string short_source_path(const char* file) {
  std::string path = file ? file : "?";
  const auto last = path.find_last_of('/');
  if (last == std::string::npos || last == 0) return path;
  const auto before = path.find_last_of('/', last - 1);
  return before == std::string::npos ? path : path.substr(before + 1);
}

Error::Error(const char* file, int line, const std::string& message)
    : std::runtime_error(short_source_path(file) + ":" + std::to_string(line) + ": " + message),
      file_(short_source_path(file)),
      line_(line),
      message_(message) {}

void throw_error(const char* file, int line, const std::string& message) {
  throw Error(file, line, message);
}

}  // namespace seqbench
