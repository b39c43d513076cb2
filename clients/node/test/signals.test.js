// The README's example runs as written, and handleSignals turns SIGINT/SIGTERM into a
// graceful stop() (a second signal ends the process at once), in a child process.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, before, test } from 'node:test';

import { publish, subscribe } from '../index.js';
import { createDatabase } from './helpers/database.js';
import { deliveriesOfEvent, deliveryOf } from './helpers/deliveries.js';
import { waitFor } from './helpers/wait.js';

const root = fileURLToPath(new URL('..', import.meta.url));
let db;

before(async () => {
  db = await createDatabase('signals');
  await subscribe(db.admin, 'mailer', ['order.placed']);
  await subscribe(db.admin, 'stuck', ['stuck.event']);
  await db.admin.query('CREATE TABLE orders (id int PRIMARY KEY, email text)');
});

after(async () => {
  await db?.drop();
});

// Starts `file` with PGDATABASE naming the test's database (PGHOST, PGPORT and PGUSER
// are the suite's) and `env`; resolves { child, output() } once `ready` is printed.
async function startChild(file, ready, env = {}) {
  const child = spawn(process.execPath, [file], {
    cwd: root,
    env: { ...process.env, PGDATABASE: db.name, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (d) => { stdout += d; });
  child.stderr.on('data', (d) => { stderr += d; });
  const exited = once(child, 'exit');
  await waitFor(() => stdout.includes(ready) || child.exitCode !== null, { what: `"${ready}" from the child` });
  assert.ok(stdout.includes(ready), `the child exited early: ${stderr}`);
  return { child, exited, output: () => ({ stdout, stderr }) };
}

async function lanesHeldBy(name) {
  const { rows } = await db.admin.query('SELECT count(*)::int AS n FROM relaybus.lanes WHERE lease_owner = $1', [name]);
  return rows[0].n;
}

async function connections() {
  const { rows } = await db.admin.query(
    'SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()', [db.name]);
  return rows[0].n;
}

test("the README's example publishes, handles, buries bad data, and stops cleanly on SIGINT", async () => {
  const readme = readFileSync(`${root}README.md`, 'utf8');
  const code = /```js\n([\s\S]*?)```/.exec(readme)[1];
  assert.ok(code.split('\n').length <= 30, 'the example is meant to stay under 30 lines');
  // In a directory of its own (the package's may not be writable), where `relaybus` and
  // `pg` resolve to this package and its pg, as they would in an application.
  const dir = mkdtempSync(path.join(os.tmpdir(), 'relaybus-readme-'));
  mkdirSync(path.join(dir, 'node_modules'));
  symlinkSync(root, path.join(dir, 'node_modules', 'relaybus'));
  symlinkSync(path.join(root, 'node_modules', 'pg'), path.join(dir, 'node_modules', 'pg'));
  const file = path.join(dir, 'example.mjs');
  writeFileSync(file, code);
  try {
    const { child, exited, output } = await startChild(file, 'mail to ann@example.com for order 1');
    // An order without an email is buried at once: a dead letter after one attempt, not
    // retried with backoff for hours.
    const bad = await publish(db.admin, 'order.placed', { order_id: 2 });
    await waitFor(() => output().stderr.includes(`gave up on ${bad}`), { what: 'the burial' });
    assert.deepEqual(await deliveryOf(db.admin, bad, 'mailer'), { status: 'dead', attempts: 1, last_error: 'order 2 has no email' });
    child.kill('SIGINT');
    const [exitCode, signal] = await exited;
    assert.equal(signal, null, `killed by ${signal}: ${output().stderr}`);
    assert.equal(exitCode, 0, output().stderr);
    assert.equal(output().stderr, `gave up on ${bad}: order 2 has no email\n`,
      'the default logger printed something on a normal run');
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
  const { rows } = await db.admin.query('SELECT * FROM orders');
  assert.deepEqual(rows, [{ id: 1, email: 'ann@example.com' }]);
  const { rows: [left] } = await db.admin.query(
    "SELECT pending::int, processing::int FROM relaybus.statistics() WHERE handler = 'mailer'");
  assert.deepEqual(left, { pending: 0, processing: 0 }, 'every delivery but the dead letter completed');
  assert.equal(await lanesHeldBy('mailer-service'), 0);
  await waitFor(async () => (await connections()) === 0, { what: "the example's connections to close" });
});

test('SIGTERM stops gracefully: the stuck delivery is released after the timeout', async () => {
  const id = await publish(db.admin, 'stuck.event', {});
  const { child, exited, output } = await startChild('test/fixtures/stuck-worker.mjs', 'running', {
    DATABASE_URL: db.url,
    SHUTDOWN_TIMEOUT: '200',
    NODE_DEBUG: 'relaybus', // the default logger's debug and info lines then go to stderr
  });
  child.kill('SIGTERM');
  const [exitCode, signal] = await exited;
  assert.equal(signal, null);
  assert.equal(exitCode, 0, output().stderr);
  assert.match(output().stdout, /stopped/);
  const { stderr } = output();
  assert.match(stderr, /RELAYBUS \d+: worker stuck-service started/);
  assert.match(stderr, /RELAYBUS \d+: received SIGTERM; stopping/);
  assert.match(stderr, /relaybus: 1 handler was still running after 200 ms; its delivery was released/);
  const rows = (await deliveriesOfEvent(db.admin, id)).map(({ status, attempts }) => ({ status, attempts }));
  assert.deepEqual(rows, [{ status: 'pending', attempts: 0 }]);
  assert.equal(await lanesHeldBy('stuck-service'), 0);
});

test('a second SIGINT during the graceful stop ends the process at once', async () => {
  await waitFor(async () => (await connections()) === 0, { what: 'the previous child to disconnect' });
  const { child, exited, output } = await startChild('test/fixtures/stuck-worker.mjs', 'running', {
    DATABASE_URL: db.url,
    SHUTDOWN_TIMEOUT: '60000',
  });
  child.kill('SIGINT');
  await new Promise((resolve) => setTimeout(resolve, 200));
  assert.equal(child.exitCode, null, 'still waiting for the stuck handler');
  const started = Date.now();
  child.kill('SIGINT');
  const [, signal] = await exited;
  assert.equal(signal, 'SIGINT', output().stderr);
  assert.ok(Date.now() - started < 2000);
});
