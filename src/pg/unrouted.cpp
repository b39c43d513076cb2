#include "unrouted.hpp"

#include <set>

#include "counters.hpp"
#include "guard.hpp"
#include "settings.hpp"

#include "../core/error.hpp"

namespace relaybus::pg::unrouted {

namespace {

// "type \"a\"" or "types \"a\", \"b\"": the distinct types, at most five named.
std::string type_list(const std::vector<std::string>& types) {
  const std::set<std::string> distinct(types.begin(), types.end());
  std::string out = distinct.size() == 1 ? "type " : "types ";
  int named = 0;
  for (const std::string& t : distinct) {
    if (named == 5) {
      out += " and " + std::to_string(distinct.size() - 5) + " more";
      break;
    }
    if (named > 0) out += ", ";
    out += "\"" + t + "\"";
    ++named;
  }
  return out;
}

}  // namespace

void stored(const std::vector<std::string>& types) {
  if (types.empty()) return;
  const settings::UnroutedPublish level = settings::unrouted_publish();
  if (level == settings::UnroutedPublish::kError)
    throw core::Error(
        core::ErrorCode::kUndefinedObject, "no handler is subscribed to event " + type_list(types),
        "Check the spelling of the type, or subscribe a handler to it first. If events that no "
        "handler receives yet are expected, set relaybus.unrouted_publish to notice or ignore.",
        "relaybus.unrouted_publish is error: the event would have been stored for no handler.");
  for (const std::string& type : types) counters::add_unrouted(type);
  if (level == settings::UnroutedPublish::kIgnore) return;
  const std::string message =
      types.size() == 1 ? "no handler is subscribed to event " + type_list(types) +
                              ": the event was stored for no handler"
                        : std::to_string(types.size()) + " events were stored for no handler (" +
                              type_list(types) + ")";
  const int elevel = level == settings::UnroutedPublish::kWarning ? WARNING : NOTICE;
  pg_call([&] {
    ereport(elevel, (errmsg_internal("%s", message.c_str()),
                     errhint("Check the spelling of the type, or subscribe a handler to it. "
                             "relaybus.unrouted_publish sets what such a publish reports.")));
  });
}

}  // namespace relaybus::pg::unrouted
