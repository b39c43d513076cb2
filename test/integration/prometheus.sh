#!/usr/bin/env bash
# The monitoring files of docs/ with the real programs, on a throwaway cluster of its own:
# Debian's prometheus-postgres-exporter runs docs/postgres_exporter.yml's queries, and a
# real Prometheus scrapes it every second with docs/prometheus-rules.yml loaded, while
# handlers of the test database publish, complete, fail and dead-letter. Then
# (prometheus_check.py): every metric the queries file declares is in the exporter's
# scrape; every rule loads and evaluates without an error; every query of
# docs/grafana-dashboard.json, its variables' included, returns the test database's series;
# and promtool's unit tests of the rules (prometheus_rules_test.yml) pass. And a C++
# dispatcher's rb::prometheus_text passes promtool's linter (prometheus_worker.cpp). Needs
# prometheus and prometheus-postgres-exporter (scripts/install-deps --test).
set -euo pipefail
cd "$(dirname "$0")/../.."

for p in prometheus promtool prometheus-postgres-exporter; do
  command -v "$p" >/dev/null || { echo "not ok - $p not found: scripts/install-deps --test"; exit 1; }
done
port=$(( ${PGPORT:-54329} + 18 ))
dir=/tmp/relaybus-prometheus-$port
export RELAYBUS_CLUSTER_SETTINGS="relaybus.database = 'rb_prom'
relaybus.maintenance_interval = '100ms'"
scripts/cluster start "$dir" "$port"
work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  scripts/cluster stop "$dir"
  rm -rf "$work"
}
trap cleanup EXIT
psql -qX -h "$dir" -p "$port" -U postgres -d postgres -c 'CREATE DATABASE rb_prom'
psql -qX -h "$dir" -p "$port" -U postgres -d rb_prom -c 'CREATE EXTENSION relaybus'

# Two free TCP ports on localhost, for the exporter and Prometheus.
read -r exporter_port prometheus_port < <(/usr/bin/python3 -c '
import socket
s = [socket.socket() for _ in range(2)]
for x in s: x.bind(("127.0.0.1", 0))
print(*(x.getsockname()[1] for x in s))')

DATA_SOURCE_NAME="host=$dir port=$port user=postgres dbname=rb_prom sslmode=disable" \
  prometheus-postgres-exporter --extend.query-path=docs/postgres_exporter.yml \
  --web.listen-address="127.0.0.1:$exporter_port" --disable-settings-metrics \
  >"$work/exporter.log" 2>&1 &
pids+=($!)
cat >"$work/prometheus.yml" <<YML
global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files:
  - $PWD/docs/prometheus-rules.yml
scrape_configs:
  - job_name: relaybus
    static_configs:
      - targets: ["127.0.0.1:$exporter_port"]
YML
prometheus --config.file="$work/prometheus.yml" --storage.tsdb.path="$work/data" \
  --web.listen-address="127.0.0.1:$prometheus_port" >"$work/prometheus.log" 2>&1 &
pids+=($!)

# The C++ runtime's counters in Prometheus's text format, from a real dispatcher of the
# installed runtime: promtool's linter accepts them, and they count what it handled.
make -s client-install PREFIX="$work/prefix" >/dev/null
PKG_CONFIG_PATH=$work/prefix/lib/pkgconfig g++ -std=c++17 -O1 -Wall -o "$work/worker" \
  test/integration/prometheus_worker.cpp $(PKG_CONFIG_PATH=$work/prefix/lib/pkgconfig pkg-config --cflags --libs relaybus-client)
psql -qX -h "$dir" -p "$port" -U postgres -d rb_prom \
  -c "SELECT relaybus.subscribe('cpp', ARRAY['cpp.event'])" \
  -c "SELECT count(relaybus.publish('cpp.event', '{}')) FROM generate_series(1, 12)" >/dev/null
LD_LIBRARY_PATH=$work/prefix/lib "$work/worker" "host=$dir port=$port user=postgres dbname=rb_prom" cpp 12 \
  >"$work/cpp-metrics.txt"
cpp_failed=0
if promtool check metrics <"$work/cpp-metrics.txt"; then
  echo "ok - promtool check metrics accepts rb::prometheus_text's exposition"
else
  echo "not ok - promtool check metrics accepts rb::prometheus_text's exposition"; cpp_failed=1
fi
if grep -qx 'relaybus_worker_succeeded_total{worker="prom-cpp"} 12' "$work/cpp-metrics.txt"; then
  echo "ok - the C++ dispatcher's exposition counts the 12 deliveries it handled"
else
  echo "not ok - the C++ dispatcher's exposition counts the 12 deliveries it handled"; cpp_failed=1
  cat "$work/cpp-metrics.txt"
fi

/usr/bin/python3 test/integration/prometheus_check.py \
  --conn "host=$dir port=$port user=postgres dbname=rb_prom" \
  --exporter "http://127.0.0.1:$exporter_port" --prometheus "http://127.0.0.1:$prometheus_port" \
  || { echo "-- exporter log"; tail -20 "$work/exporter.log"; echo "-- prometheus log"; tail -20 "$work/prometheus.log"; exit 1; }
exit $cpp_failed
