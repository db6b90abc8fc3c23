// tensorsafe: inspect, verify and extract tensor files. Commands register
// themselves (command.h); run.cc wires them into CLI11.
#include "command.h"

int main(int argc, char** argv) { return tensorsafe::cli::Run(argc, argv); }
