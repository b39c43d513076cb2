#!/usr/bin/env bash
# scripts/cluster never removes what it did not create (issue 32, finding 7): a directory of
# someone's files given to `start` or `stop`, a plain file, and a running server in a
# directory without the script's marker are refused (exit 1, a message) and left as they
# were; a missing or an empty directory is used; a cluster the script created is stopped and
# removed by `stop`, and started afresh by a second `start`.
set -euo pipefail
cd "$(dirname "$0")/../.."

port=$(( ${PGPORT:-54329} + 8 ))
dir=/tmp/relaybus-cluster-script-$port
bindir=$(pg_config --bindir)
as_postgres() { if [ "$(id -u)" = 0 ]; then (cd / && runuser -u postgres -- "$@"); else "$@"; fi; }
. test/integration/lib/checks.bash

work=$(mktemp -d /tmp/relaybus-it-cluster-XXXXXX)
chmod 755 "$work"  # as root the server runs as postgres, which must reach $empty
foreign=$work/notes       # someone's directory, with a file in it
plain=$work/plain-file    # a file, not a directory
empty=$work/empty         # an empty directory (mktemp -d, say)
mkdir "$foreign" "$empty"
echo "my notes" >"$foreign/notes.txt"
echo "a file" >"$plain"
cleanup() {
  # Whatever a server was started in (by a script that does not refuse), stopped.
  for d in "$foreign" "$plain" "$dir" "$empty"; do
    if [ -e "$d/data/postmaster.pid" ]; then
      as_postgres "$bindir/pg_ctl" -D "$d/data" -m immediate -w stop >/dev/null 2>&1 || true
    fi
  done
  rm -rf "$work" "$dir"
}
trap cleanup EXIT
# A leftover of an interrupted run of this test is the script's own (it has the marker).
scripts/cluster stop "$dir" >/dev/null 2>&1 || true

# run ARGS...: scripts/cluster ARGS; exit code in $code, stderr in $err.
run() {
  code=0
  err=$(scripts/cluster "$@" 2>&1 >/dev/null) || code=$?
}
# refused DESCRIPTION: exit 1 and the message that says why.
refused() {
  if [ "$code" = 1 ] && [[ "$err" == *"was not created by scripts/cluster"* ]]; then ok "$1"
  else not_ok "$1 (exit $code: $err)"; fi
}
notes_intact() {
  [ "$(ls -A "$foreign")" = notes.txt ] && [ "$(cat "$foreign/notes.txt")" = "my notes" ]
}

run start "$foreign" "$port"
refused "start on a directory with someone's file in it: exit 1, says why"
notes_intact && ok "... the directory and its file are left as they were, nothing added" \
  || not_ok "... the directory and its file are left as they were, nothing added ($(ls -A "$foreign" 2>&1))"
run stop "$foreign"
refused "stop on that directory: exit 1, says why"
notes_intact && ok "... the directory and its file are left as they were" \
  || not_ok "... the directory and its file are left as they were ($(ls -A "$foreign" 2>&1))"

run start "$plain" "$port"
refused "start on a plain file: exit 1, says why"
[ "$(cat "$plain" 2>/dev/null)" = "a file" ] && ok "... the file is left as it was" \
  || not_ok "... the file is left as it was"

# The normal cycle.
run start "$dir" "$port"
[ "$code" = 0 ] && ok "start on a missing directory creates and starts a cluster" \
  || not_ok "start on a missing directory creates and starts a cluster (exit $code: $err)"
[ "$(psql -h "$dir" -p "$port" -U postgres -d postgres -qXAt -c 'SELECT 1')" = 1 ] \
  && ok "... which answers" || not_ok "... which answers"
psql -h "$dir" -p "$port" -U postgres -d postgres -qX -c 'CREATE TABLE left_over ()' >/dev/null
run start "$dir" "$port"
[ "$code" = 0 ] && [ "$(psql -h "$dir" -p "$port" -U postgres -d postgres -qXAt \
  -c "SELECT to_regclass('left_over') IS NULL")" = t ] \
  && ok "start on a running cluster of its own starts a fresh one" \
  || not_ok "start on a running cluster of its own starts a fresh one (exit $code: $err)"

# A server in a directory without the marker (another tool's, or an older script's).
mv "$dir/.relaybus-cluster" "$work/marker" 2>/dev/null || true
run stop "$dir"
refused "stop on a running server in a directory without the marker: exit 1, says why"
as_postgres "$bindir/pg_ctl" -D "$dir/data" status >/dev/null 2>&1 \
  && ok "... the server still runs and its directory is still there" \
  || not_ok "... the server still runs and its directory is still there"
run start "$dir" "$port"
refused "start on it: exit 1, says why"
as_postgres "$bindir/pg_ctl" -D "$dir/data" status >/dev/null 2>&1 \
  && ok "... the server still runs" || not_ok "... the server still runs"
mv "$work/marker" "$dir/.relaybus-cluster" 2>/dev/null || true

run stop "$dir"
[ "$code" = 0 ] && ! [ -e "$dir" ] && ok "stop stops the cluster start created and removes its directory" \
  || not_ok "stop stops the cluster start created and removes its directory (exit $code: $err)"
run stop "$dir"
[ "$code" = 0 ] && ok "stop on a missing directory has nothing to do (exit 0)" \
  || not_ok "stop on a missing directory has nothing to do (exit $code: $err)"

run start "$empty" "$port"
[ "$code" = 0 ] && ok "start on an empty directory uses it" \
  || not_ok "start on an empty directory uses it (exit $code: $err)"
run stop "$empty"
[ "$code" = 0 ] && ! [ -e "$empty" ] && ok "... and stop removes it" \
  || not_ok "... and stop removes it (exit $code: $err)"

echo "cluster_script: $passed passed, $failed failed"
[ "$failed" = 0 ]
