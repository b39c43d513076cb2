// A worker's holder: the incarnation its lanes are bound to (docs/sql-api.md, "Worker names
// and incarnations"). Every claim, renewal and relinquish of one Worker instance passes the
// same holder, so any connection of its pool may run them: a pool that closes an idle
// connection never turns the worker's lanes into orphans that its next claim would take
// over (charging an attempt and running the deliveries twice). A new Worker, or a restarted
// process, gets a new one. The host and pid are there for whoever reads relaybus.lanes.
import crypto from 'node:crypto';
import os from 'node:os';

export function makeHolder() {
  return `${os.hostname().slice(0, 200)}:${process.pid}:${crypto.randomUUID()}`;
}
