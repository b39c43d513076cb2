#!/usr/bin/env bash
# RATE DUR HOLD(0/1): runtime mixed with pg_stat_statements; HOLD=1 holds a RR snapshot throughout
set -euo pipefail
cd "$(dirname "$0")/../../.."
rate=${1:-2000} dur=${2:-120} hold=${3:-0} port=55591 dir=/tmp/relaybus-profh
scripts/cluster stop $dir >/dev/null 2>&1 || true
RELAYBUS_CLUSTER_SETTINGS="pg_stat_statements.track = all
pg_stat_statements.max = 2000" scripts/cluster start $dir $port >/dev/null
conn="host=$dir port=$port dbname=ab user=postgres"
psql -qX -h $dir -p $port -U postgres -c "CREATE DATABASE ab" >/dev/null
psql -qX -h $dir -p $port -U postgres -d ab -c "CREATE EXTENSION relaybus" -c "CREATE EXTENSION pg_stat_statements" >/dev/null
/usr/bin/python3 bench/peers/relaybus_loop.py reset --conn "$conn"
psql -qX -h $dir -p $port -U postgres -d ab -c "SELECT pg_stat_statements_reset()" >/dev/null
if [ "$hold" = 1 ]; then
  (echo "BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT count(*) FROM relaybus.subscriptions;"; sleep $((dur + 20)); echo "COMMIT;") | psql -qX -h $dir -p $port -U postgres -d ab >/dev/null &
  sleep 1
fi
out=$(mktemp -d)
${BENCH:-bin/relaybus-bench} mixed --db "$conn" --out "$out/run" --rate "$rate" --duration-s "$dur" --publishers 2 --keys $((rate * dur / 4)) --dispatchers 1 --poll-ms 1000 >/dev/null 2>&1
/usr/bin/python3 bench/ab/latency_of.py "$out/run"
psql -qX -h $dir -p $port -U postgres -d ab -c "SELECT calls, round(total_exec_time::numeric,1) total_ms, round(mean_exec_time::numeric,3) mean_ms, rows, toplevel, left(regexp_replace(query, '\s+', ' ', 'g'), 110) q FROM pg_stat_statements ORDER BY total_exec_time DESC LIMIT 16"
psql -qX -h $dir -p $port -U postgres -d ab -c "SELECT calls, rows, round(mean_exec_time::numeric,3) mean_ms, left(regexp_replace(query, '\s+', ' ', 'g'), 150) q FROM pg_stat_statements WHERE query ~* 'update relaybus.lanes' ORDER BY rows DESC"
psql -qX -h $dir -p $port -U postgres -d ab -c "SELECT relname, n_tup_upd, n_tup_hot_upd, n_live_tup, n_dead_tup, pg_size_pretty(pg_total_relation_size(relid)) FROM pg_stat_user_tables WHERE schemaname='relaybus' ORDER BY n_dead_tup DESC LIMIT 6"
pkill -f "sleep $((dur + 20))" || true
scripts/cluster stop $dir >/dev/null
