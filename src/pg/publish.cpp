// publish: the event and its deliveries, in the caller's transaction (publish_one.hpp). One
// body for every version; the version decides how deliveries are written
// (delivery_writer.hpp).
#include "delivery_writer.hpp"
#include "publish_one.hpp"
#include "spi.hpp"

#include "../core/error.hpp"

namespace relaybus::pg {

namespace {

Datum publish_with(FunctionCallInfo fcinfo, const DeliveryWriter& writer) {
  if (PG_ARGISNULL(0)) throw core::Error(core::ErrorCode::kNullValue, "type must not be NULL");
  if (PG_ARGISNULL(1)) throw core::Error(core::ErrorCode::kNullValue, "payload must not be NULL");
  PublishInput in;
  in.type = text_of(PG_GETARG_DATUM(0));
  in.payload = PG_GETARG_DATUM(1);
  if (!PG_ARGISNULL(2)) in.key = text_of(PG_GETARG_DATUM(2));
  if (!PG_ARGISNULL(3)) in.event_id = text_of(PG_GETARG_DATUM(3));
  if (!PG_ARGISNULL(4)) in.handlers = text_array_of(PG_GETARG_DATUM(4), "handlers");
  if (!PG_ARGISNULL(5)) in.available_at = PG_GETARG_TIMESTAMPTZ(5);
  in.headers_null = PG_ARGISNULL(6);
  if (!in.headers_null) in.headers = PG_GETARG_DATUM(6);

  SpiConnection spi;
  const std::string event_id = publish_one(in, "", writer);
  spi.finish();  // the returned text is built after SPI_finish, in the caller's context
  Datum result = 0;
  pg_call([&] {
    result = PointerGetDatum(cstring_to_text_with_len(event_id.data(), event_id.size()));
  });
  return result;
}

// 0.2.x: deliveries with key sequences.
Datum publish_body(FunctionCallInfo fcinfo) {
  return publish_with(fcinfo, sequenced_deliveries());
}

// 0.3.0: deliveries staged until commit, at their lanes' next positions.
Datum publish_positions_body(FunctionCallInfo fcinfo) {
  return publish_with(fcinfo, staged_deliveries());
}

}  // namespace

}  // namespace relaybus::pg

RELAYBUS_SQL_FUNCTION(relaybus_publish, relaybus::pg::publish_body)
RELAYBUS_SQL_FUNCTION(relaybus_publish_positions, relaybus::pg::publish_positions_body)
