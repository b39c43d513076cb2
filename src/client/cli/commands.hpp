// The operator tool's commands; each returns the process exit code. Their options are
// declared in main.cpp.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "client/tool/command_line.hpp"
#include "listings.hpp"
#include "store/store.hpp"

namespace relaybus::cli {

int setup_command(const tool::Parsed& args);
int subscribe_command(const tool::Parsed& args);
int unsubscribe_command(const tool::Parsed& args);
int pause_command(const tool::Parsed& args);
int resume_command(const tool::Parsed& args);
int cancel_command(const tool::Parsed& args);
int stats_command(const tool::Parsed& args);
int dead_list_command(const tool::Parsed& args);
int dead_requeue_command(const tool::Parsed& args);
int maintain_command(const tool::Parsed& args);
int list_command(const tool::Parsed& args);
int show_command(const tool::Parsed& args);
int counters_command(const tool::Parsed& args);

// The event types published to no handler, most events first, where the store counts them
// (PostgreSQL with relaybus 0.3.0, preloaded); nullopt elsewhere.
std::optional<std::vector<UnroutedType>> unrouted_types(store::Store& store, const std::string& db);

}  // namespace relaybus::cli
