#!/usr/bin/env bash
# Installs the npm packages of the benchmark's Node.js peers (graphile.mjs, pgboss.mjs) into
# bench/peers/node/node_modules, exactly at the versions pinned in package-lock.json (npm ci
# removes whatever node_modules held before). The harness calls it before a run; it needs
# Node.js 20 with npm, and the npm registry or npm's cache.
set -euo pipefail
cd "$(dirname "$0")"
exec npm ci --no-audit --no-fund --prefer-offline --loglevel=error
