#include "suites/text_format.h"

#include <charconv>
#include <system_error>

namespace seqbench {

std::string fixed_decimals(double x, int decimals) {
  if (x == 0.0) x = 0.0;  // no "-0"
  // DBL_MAX has 309 integer digits: with a sign, the point and decimals, 512 holds any finite x.
  char buffer[512];
  const auto result = std::to_chars(buffer, buffer + sizeof buffer, x, std::chars_format::fixed, decimals);
  if (result.ec == std::errc()) return std::string(buffer, result.ptr);
  // Too many decimals asked, or not finite: still locale-free, in the shortest form.
  const auto shortest = std::to_chars(buffer, buffer + sizeof buffer, x);
  return std::string(buffer, shortest.ptr);
}

std::string fixed_decimals_apart(double x, double limit, int decimals) {
  int d = decimals;
  while (x != limit && d < decimals + 6 && fixed_decimals(x, d) == fixed_decimals(limit, d)) ++d;
  return fixed_decimals(x, d);
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
