#include <iostream>

#include "client/cli/cli.h"

int main(int argc, char** argv) {
  return autotune::client::RunCli(argc, argv, std::cout, std::cerr);
}
