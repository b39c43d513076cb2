// Typed access to a delivery's payload through nlohmann/json (Debian's nlohmann-json3-dev),
// header only: the runtime hands the payload over as the JSON text the store returned, and
// these parse it on the handler's thread.
//
//   const nlohmann::json order = rb::payload(d);
//   const int id = order.at("order_id").get<int>();     // nlohmann::json::exception if not
//   const auto o = rb::payload_as<Order>(d);            // with from_json(const json&, Order&)
//
// A payload the handler cannot read throws nlohmann::json::exception, which fails the
// attempt like any exception; a handler that knows retrying cannot help throws rb::Bury
// instead (bury.hpp), as docs/cpp-runtime.md shows.
#pragma once

#include <nlohmann/json.hpp>

#include "../store/store.hpp"

namespace relaybus::client {

// The payload as a JSON value (an object: relaybus stores objects only).
inline nlohmann::json payload(const store::Delivery& delivery) {
  return nlohmann::json::parse(delivery.payload);
}

// The payload converted to T, through nlohmann/json's conversions (from_json for your types).
template <typename T>
T payload_as(const store::Delivery& delivery) {
  return payload(delivery).get<T>();
}

}  // namespace relaybus::client
