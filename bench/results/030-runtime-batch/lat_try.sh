#!/bin/bash
# One mixed run of the C++ runtime at a fixed rate on a fresh 0.3.0 database; prints its
# latency and the claims' mean server time. Kept as the command behind batch-ab.log.
#   lat_try.sh RATE DUR CONCURRENCY BATCH [more relaybus-bench options]
cd "$(dirname "$0")/../../.."
port=54498; dir=/tmp/relaybus-try-$port
scripts/cluster start $dir $port >/dev/null 2>&1 || true
conn="host=$dir port=$port dbname=ab user=postgres"
psql -qX -h $dir -p $port -U postgres -c "DROP DATABASE IF EXISTS ab" -c "CREATE DATABASE ab" >/dev/null 2>&1
psql -qX -h $dir -p $port -U postgres -d ab -c "CREATE EXTENSION relaybus VERSION '0.3.0'" -c "CREATE EXTENSION pg_stat_statements" >/dev/null
/usr/bin/python3 bench/peers/relaybus_loop.py reset --conn "$conn"
out=$(mktemp -d)
${BENCH:-bin/relaybus-bench} mixed --db "$conn" --out "$out/run" --rate $1 --duration-s $2 --publishers 2 --keys $(( $1 * $2 / 4 )) --dispatchers 1 --concurrency $3 --batch $4 --poll-ms 1000 $5 >/dev/null 2>&1
claim=$(psql -qXAt -h "$dir" -p "$port" -U postgres -d ab -c "SELECT round(sum(total_exec_time)::numeric / nullif(sum(calls), 0), 2)||' ms x '||sum(calls) FROM pg_stat_statements WHERE query LIKE '%relaybus.claim(%' AND toplevel")
echo "rate $1 conc $3 batch $4: $(/usr/bin/python3 bench/ab/latency_of.py "$out/run"); claim $claim"
rm -rf $out
scripts/cluster stop $dir >/dev/null
