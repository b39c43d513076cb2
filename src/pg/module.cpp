// The shared library's entry: PostgreSQL's magic block and _PG_init.
#include "postgres.hpp"
#include "settings.hpp"

extern "C" {
PG_MODULE_MAGIC;

void _PG_init(void);
void _PG_init(void) {
  relaybus::pg::settings::define();
}
}
