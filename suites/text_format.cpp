#include "suites/text_format.h"

#include <charconv>
#include <system_error>

namespace seqbench {

std::string fixed_decimals(double x, int decimals) {
  if (x == 0.0) x = 0.0;  // no "-0"
  char buffer[64];
  const auto result = std::to_chars(buffer, buffer + sizeof buffer, x, std::chars_format::fixed, decimals);
  // Values reaching here passed validation (finite, and a report's magnitudes fit easily), but a
  // failure must still not print garbage.
  if (result.ec != std::errc()) return std::to_string(x);
  return std::string(buffer, result.ptr);
}

std::string markdown_cell(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '|')
      out += "\\|";
    else if (c == '\n' || c == '\r')
      out += ' ';
    else
      out += c;
  }
  return out;
}

}  // namespace seqbench
