// The tool's subcommands; each returns the process exit code.
#pragma once

#include "args.hpp"

namespace relaybus::cli {

int setup_command(const Args& args);
int subscribe_command(const Args& args);
int unsubscribe_command(const Args& args);
int stats_command(const Args& args);
int maintain_command(const Args& args);
int dead_command(const Args& args);
int bench_drain_command(const Args& args);
int bench_publish_command(const Args& args);
int bench_mixed_command(const Args& args);

}  // namespace relaybus::cli
