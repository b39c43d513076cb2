// The commands of relaybus-bench; each returns the process exit code. Their options are
// declared in bench_main.cpp.
#pragma once

#include "client/tool/command_line.hpp"

namespace relaybus::bench {

int drain_command(const tool::Parsed& args);
int publish_command(const tool::Parsed& args);
int mixed_command(const tool::Parsed& args);

}  // namespace relaybus::bench
