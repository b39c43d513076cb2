// relaybus.lanes_changed(): the trigger of relaybus.lanes (0.3.0), after every insert and
// update of a lease row, however it is written (a claim, a renewal, relinquish, a takeover,
// an update script, a row edited by hand). It moves the lane's lease counter at the
// transaction's commit (lane_changes::lease_changed_at_commit), which tells every claim
// that remembers the lane's lease (lease_memory.hpp) to read it again. A row lock makes no
// new version and fires nothing: only writes count. Writes a lease takes a few times a
// minute; the trigger costs a few microseconds each.
#include "guard.hpp"
#include "lane_changes.hpp"
#include "postgres.hpp"

extern "C" {
#include "commands/trigger.h"
}

namespace relaybus::pg {

namespace {

Datum lanes_changed_body(FunctionCallInfo fcinfo) {
  // PostgreSQL's own code for a trigger function called some other way.
  TriggerData* data =
      CALLED_AS_TRIGGER(fcinfo) ? reinterpret_cast<TriggerData*>(fcinfo->context) : nullptr;
  if (data == nullptr || !TRIGGER_FIRED_FOR_ROW(data->tg_event) ||
      !TRIGGER_FIRED_AFTER(data->tg_event) || TRIGGER_FIRED_BY_DELETE(data->tg_event))
    pg_call([] {
      ereport(ERROR, (errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
                      errmsg("lanes_changed() may only run as the trigger of relaybus.lanes")));
    });
  HeapTuple tuple =
      TRIGGER_FIRED_BY_UPDATE(data->tg_event) ? data->tg_newtuple : data->tg_trigtuple;
  TupleDesc desc = data->tg_relation->rd_att;
  char* handler = nullptr;  // palloc'd in the trigger's memory context
  std::int16_t lane = -1;
  pg_call([&] {
    const int handler_at = SPI_fnumber(desc, "handler");
    const int lane_at = SPI_fnumber(desc, "lane");
    if (handler_at <= 0 || lane_at <= 0) return;
    bool handler_null = false, lane_null = false;
    const Datum h = heap_getattr(tuple, handler_at, desc, &handler_null);
    const Datum l = heap_getattr(tuple, lane_at, desc, &lane_null);
    if (handler_null || lane_null) return;
    handler = TextDatumGetCString(h);
    lane = DatumGetInt16(l);
  });
  if (handler != nullptr && lane >= 0) lane_changes::lease_changed_at_commit(handler, lane);
  return PointerGetDatum(tuple);
}

}  // namespace

}  // namespace relaybus::pg

RELAYBUS_SQL_FUNCTION(relaybus_lanes_changed, relaybus::pg::lanes_changed_body)
