#!/usr/bin/env bash
# A publish routes by the subscriptions committed with the event it reacts to, even in the
# window where that commit is visible but its cache invalidations are not sent yet: with
# relaybus preloaded (an in-database handler woken at commit, an external worker, and one
# whose copy was read while the commit was announced but not yet visible) and without the
# preload (an external worker); and a logical replication apply worker's changes, and a
# new subscription's initial copy, reach the copies; while the copies' triggers do not fire
# always (disabled, or left ENABLE by a restore), publish routes by the table and warns
# once. The window is held open by a test
# fixture, test/integration/lib/commit_stall.c, built here. Needs /usr/bin/python3 with
# python3-psycopg and the PostgreSQL server headers.
set -euo pipefail
cd "$(dirname "$0")/../.."

port=$(( ${PGPORT:-54329} + 3 ))
dir=/tmp/relaybus-subscription-commit-$port
fixture_dir=$(mktemp -d)
trap 'rm -rf "$fixture_dir"' EXIT
fixture=$fixture_dir/commit_stall.so
cc -shared -fPIC -O1 -Wall -I"$(pg_config --includedir-server)" -o "$fixture" \
  test/integration/lib/commit_stall.c
chmod 755 "$fixture_dir"  # the server (the postgres user) loads it
# wal_level: the logical replication case. synchronous_standby_names names a standby that
# never connects: a commit with synchronous_commit = on waits (before it is visible) until
# the test cancels the wait; every other commit (synchronous_commit = off, from
# scripts/cluster) does not wait.
export RELAYBUS_CLUSTER_SETTINGS="relaybus.sql_handler_workers = 1
relaybus.sql_handler_poll_interval = '100ms'
wal_level = logical
synchronous_standby_names = 'relaybus_test_nobody'"
scripts/cluster start "$dir" "$port"
trap 'scripts/cluster stop "$dir"; rm -rf "$fixture_dir"' EXIT
conninfo="host=$dir port=$port user=postgres"

status=0
/usr/bin/python3 test/integration/subscription_commit.py "$conninfo" "$fixture" preloaded || status=1
psql -qXAt -h "$dir" -p "$port" -U postgres -d postgres \
  -c "ALTER SYSTEM SET shared_preload_libraries = 'pg_stat_statements'" >/dev/null
scripts/cluster restart "$dir" >/dev/null
/usr/bin/python3 test/integration/subscription_commit.py "$conninfo" "$fixture" unpreloaded || status=1
exit $status
