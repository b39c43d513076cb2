#!/usr/bin/env bash
# docs/postgres_exporter.yml and the counters on a throwaway cluster of their own (the
# background workers serve the test database, so an in-database handler runs): every query
# of the exporter file runs and returns the columns it declares; handler_worker_errors
# counts a handler call that raised; without shared_preload_libraries counters() raises
# 55000. Needs /usr/bin/python3 with python3-psycopg and python3-yaml.
set -euo pipefail
cd "$(dirname "$0")/../.."

port=$(( ${PGPORT:-54329} + 6 ))
dir=/tmp/relaybus-exporter-$port
export RELAYBUS_CLUSTER_SETTINGS="relaybus.database = 'rb_exporter'
relaybus.sql_handler_poll_interval = '100ms'
relaybus.maintenance_interval = '100ms'"
scripts/cluster start "$dir" "$port"
trap 'scripts/cluster stop "$dir"' EXIT
conn="host=$dir port=$port user=postgres dbname=rb_exporter"
psql -qX -h "$dir" -p "$port" -U postgres -d postgres -c 'CREATE DATABASE rb_exporter'
psql -qX -h "$dir" -p "$port" -U postgres -d rb_exporter -c 'CREATE EXTENSION relaybus'

/usr/bin/python3 test/integration/postgres_exporter.py "$conn" queries

# Without the preload: ALTER SYSTEM outranks postgresql.conf.
psql -qX -h "$dir" -p "$port" -U postgres -d postgres \
  -c "ALTER SYSTEM SET shared_preload_libraries = 'pg_stat_statements'"
scripts/cluster restart "$dir"
/usr/bin/python3 test/integration/postgres_exporter.py "$conn" nopreload
