// The `seqbench` command. main() only forwards here, so tests drive the real command in-process.
#pragma once

#include <iosfwd>

namespace seqbench {

// Returns the process exit code: 0 success, 1 a failed check or a runtime error, 2 bad usage (an
// unknown command or option, or an option value that names nothing or does not parse: a suite, a
// table format, a regex, a number), 3 an incomplete `run`; `targets` exits with its verdict
// (suites/targets.h) and 2 on bad input. Every error is one line on `err`, starting
// "seqbench: error: ".
int run_cli(int argc, const char* const* argv, std::ostream& out, std::ostream& err);

}  // namespace seqbench
