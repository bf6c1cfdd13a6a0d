#include <iostream>

#include "suites/cli.h"

int main(int argc, char** argv) {
  return seqbench::run_cli(argc, argv, std::cout, std::cerr);
}
