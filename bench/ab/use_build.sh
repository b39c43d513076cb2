# Sourced by the A/B scripts (bench/ab/*.sh): use_build SO [SQL_DIR] CLUSTER_DIR installs a
# build's library (and, given a directory, its relaybus--*.sql scripts) into this
# PostgreSQL installation and restarts the throwaway cluster in CLUSTER_DIR on it.
use_build() {
  local so=$1 sql=$2 dir=$3 lib
  lib=$(pg_config --pkglibdir)
  [ -n "$sql" ] && cp "$sql"/relaybus--*.sql "$(pg_config --sharedir)/extension/"
  # A new file, then a rename: a running server keeps the library it has mapped (copying
  # over it in place crashes the backends that have it mapped).
  cp "$so" "$lib/relaybus.so.new" && mv "$lib/relaybus.so.new" "$lib/relaybus.so"
  scripts/cluster restart "$dir" >/dev/null
}
