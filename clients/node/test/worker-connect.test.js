// A database that accepts TCP connections but never answers (a hung server, a proxy whose
// backend is gone): pg has no connect timeout by default, so without one of the worker's
// own a claim waiting for a new connection, and start() and stop() with it, never return.
import assert from 'node:assert/strict';
import net from 'node:net';
import path from 'node:path';
import { after, before, test } from 'node:test';

import { Worker, subscribe } from '../index.js';
import { createDatabase } from './helpers/database.js';
import { recordingLogger, waitFor } from './helpers/wait.js';

let db;

before(async () => {
  db = await createDatabase('connect');
});

after(async () => {
  await db?.drop();
});

// A TCP server that forwards to the cluster while `forwarding`, and otherwise accepts
// connections and never writes to them.
async function proxy() {
  const forwarded = new Set();
  const silent = new Set();
  const state = { forwarding: true };
  const socketPath = path.join(process.env.PGHOST, `.s.PGSQL.${process.env.PGPORT}`);
  const server = net.createServer((sock) => {
    sock.on('error', () => {});
    if (!state.forwarding) {
      silent.add(sock);
      return;
    }
    const upstream = net.connect(socketPath);
    upstream.on('error', () => sock.destroy());
    sock.on('close', () => upstream.destroy());
    upstream.on('close', () => sock.destroy());
    sock.pipe(upstream).pipe(sock);
    forwarded.add(sock);
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: (database) => `postgresql://${encodeURIComponent(process.env.PGUSER)}@127.0.0.1:${server.address().port}/${database}`,
    silent,
    hang() {
      state.forwarding = false;
      for (const sock of forwarded) sock.destroy();
    },
    close() {
      for (const sock of [...forwarded, ...silent]) sock.destroy();
      return new Promise((resolve) => server.close(resolve));
    },
  };
}

function within(promise, ms) {
  let timer;
  return Promise.race([
    promise.then(() => true, () => true),
    new Promise((resolve) => { timer = setTimeout(() => resolve(false), ms); }),
  ]).finally(() => clearTimeout(timer));
}

test('start() against a server that never answers rejects after the connect timeout', async () => {
  const p = await proxy();
  p.hang();
  try {
    const worker = new Worker({ connectionString: p.url(db.name), name: 'silent-start', logger: recordingLogger().logger });
    worker.handle('anything', async () => {});
    const started = Date.now();
    const starting = worker.start();
    const ended = await within(starting, 14000);
    const took = Date.now() - started;
    assert.ok(ended, 'start() did not end within 14 s');
    await assert.rejects(starting, /timeout/);
    assert.ok(took >= 9000, `start() gave up after ${took} ms, before the 10 s connect timeout`);
    assert.ok(await within(worker.stop(), 3000), 'stop() after the failed start() did not return');
  } finally {
    await p.close();
  }
});

test('stop() returns within shutdownTimeout and a margin while a claim waits for a connection', async () => {
  await subscribe(db.admin, 'silent', ['silent.event']);
  const p = await proxy();
  const { logger, lines } = recordingLogger();
  const worker = new Worker({
    connectionString: p.url(db.name), name: 'silent-stop', pollInterval: 50, shutdownTimeout: 300, logger,
  });
  worker.handle('silent', async () => {});
  try {
    await worker.start();
    await waitFor(() => worker.listening, { what: 'the LISTEN connection' });
    p.hang();
    // The pool's connections broke; the next claim (and the listener) wait for new ones.
    await waitFor(() => p.silent.size >= 2, { what: 'the claim and the listener to connect to the silent server' });
    const stopping = Date.now();
    const stopped = await within(worker.stop(), 15000);
    const took = Date.now() - stopping;
    assert.ok(stopped, 'stop() did not return within 15 s');
    assert.ok(took < 4500, `stop() took ${took} ms with a 300 ms shutdownTimeout`);
    assert.equal(worker.state, 'stopped');
    const warnings = lines.filter((l) => l.level === 'warn').map((l) => l.text);
    assert.ok(warnings.some((t) => /claim in progress/.test(t)), warnings.join('\n'));
  } finally {
    await p.close();
  }
});
