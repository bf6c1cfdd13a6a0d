// Numbers and Markdown cells as the project's reports print them (`seqbench table`, `seqbench
// targets`): one formatting, so that two printers cannot drift apart.
#pragma once

#include <string>

namespace seqbench {

// x with `decimals` digits after the point, through std::to_chars: unlike printf it ignores the C
// locale, so a German locale cannot turn "1.50" into "1,50" (and break a CSV). No "-0".
std::string fixed_decimals(double x, int decimals);

// x as fixed_decimals(x, decimals), with up to 6 more decimals where x differs from `limit` but
// the two would print alike: a miss must not read as exactly its limit ("79.96 % of copy (limit
// 80.0 %)", not "80.0 % ... (limit 80.0 %)"; "0.996×", not "1.00×", against "needs > 1×").
std::string fixed_decimals_apart(double x, double limit, int decimals);

// Text safe inside a Markdown table cell: a pipe would end the cell and a newline the row.
std::string markdown_cell(const std::string& text);

}  // namespace seqbench
