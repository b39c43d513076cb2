// The Worker: claims deliveries for its registered handlers, runs them with a concurrency
// limit and ends each attempt. It wires together the pieces in this directory:
//
//   claim loop (here)      relaybus.claim with the handlers, this instance's holder and the
//                          lease; claims only up to the free capacity, so every claimed
//                          delivery starts at once; waits for a notification, a settled
//                          delivery or the poll interval when there is nothing to claim
//   CompletionBatcher      successful completions, grouped into complete_many
//   LeaseRenewer           extend_lease while deliveries are in flight
//   WakeupListener         LISTEN relaybus on its own connection
//
// "In flight" counts a delivery from its claim until its attempt has ended in the database
// (completed, failed, buried, released), not until its handler returned: a completion
// still queued keeps its lane held, and the capacity it uses is free only once it is sent.
//
// Every statement uses the pool and passes the holder, so any connection may run it.

import { EventEmitter } from 'node:events';
import pg from 'pg';

import { CompletionBatcher } from './completion-batcher.js';
import { BuryError, errorText, explainDatabaseError } from './errors.js';
import { makeHolder } from './holder.js';
import { LeaseRenewer } from './lease-renewer.js';
import { checkWorkerSetup } from './preflight.js';
import {
  BURY, CANCEL_BACKENDS, CLAIM, COMPLETE, COMPLETE_MANY, EXTEND_LEASE, FAIL, RELEASE_MANY, RELINQUISH,
} from './sql.js';
import { checkBoolean, checkFunction, checkKnownOptions, checkName, interval } from './validate.js';
import { Wakeup, sleep } from './wakeup.js';
import { WakeupListener } from './wakeup-listener.js';
import { workerOptions } from './worker-options.js';

const ROLE = 'relaybus_worker';

function toEvent(row) {
  return {
    id: row.event_id,
    handler: row.handler,
    type: row.type,
    key: row.key,
    payload: row.payload,
    headers: row.headers,
    attempts: row.attempts,
    publishedAt: row.published_at,
    leaseToken: row.lease_token,
  };
}

// Resolves true when every promise settled within `ms`, false otherwise.
async function settledWithin(promises, ms) {
  let timer;
  const timeout = new Promise((resolve) => {
    timer = setTimeout(() => resolve(false), ms);
  });
  try {
    return await Promise.race([Promise.allSettled(promises).then(() => true), timeout]);
  } finally {
    clearTimeout(timer);
  }
}

export class Worker extends EventEmitter {
  #o;
  #log;
  #holder = makeHolder();
  #leaseText;
  #handlers = new Map(); // name -> { fn, transactional }
  #pool = null;
  #ownsPool = false;
  #state = 'new'; // new, starting, running, stopping, stopped
  #starting = null;
  #stopping = null;
  #database = null;
  #user = null;

  #wakeup = new Wakeup();
  #inFlight = 0;
  #running = new Set(); // entries whose handler (or its settlement) has not finished
  #loopDone = null;
  #closing = false; // shutdown's last phase: retries get one final try
  #lifetime = new AbortController(); // aborted then, ending retry sleeps

  #batcher = null;
  #renewer = null;
  #listener = null;
  #signalHandlers = null;
  #connections = 0; // of the pool the worker made: opened and not yet closed
  #allClosed = null;

  #stats = {
    claims: 0, // claim statements
    claimed: 0, // deliveries received
    succeeded: 0, // handlers that returned
    failed: 0, // handlers that threw (failed or buried)
    completed: 0, // deliveries completed in the database
    completeStatements: 0, // complete_many statements
    dead: 0, // dead-lettered (attempts exhausted, or buried)
    lost: 0, // attempts whose lease was gone when they ended
    released: 0, // deliveries given back at shutdown
    renewals: 0, // extend_lease statements
    wakeups: 0, // notifications for our handlers
  };

  constructor(options) {
    super();
    this.#o = workerOptions(options);
    this.#log = this.#o.logger;
    this.#leaseText = interval(this.#o.lease);
  }

  get name() {
    return this.#o.name;
  }

  get holder() {
    return this.#holder;
  }

  // The pg.Pool the worker runs on (null before start()). Plain handlers may use it.
  get pool() {
    return this.#pool;
  }

  get state() {
    return this.#state;
  }

  get inFlight() {
    return this.#inFlight;
  }

  get listening() {
    return this.#listener?.connected ?? false;
  }

  // The backend pid of the LISTEN connection, or null: for pg_stat_activity.
  get listenerPid() {
    return this.#listener?.backendPid ?? null;
  }

  get stats() {
    return { ...this.#stats, listenConnects: this.#listener?.connects ?? 0 };
  }

  // Registers the handler for deliveries of `handler` (a name subscribed with
  // relaybus.subscribe). fn(event, context) returns (or resolves) to complete the delivery
  // and throws to fail the attempt; throw a BuryError to dead-letter it at once.
  // { transactional: true } runs fn inside a transaction on context.client and completes
  // the delivery in that same transaction: its writes and the completion commit together.
  handle(handler, fn, options) {
    if (this.#state !== 'new') throw new Error('worker.handle(): register handlers before start()');
    checkName(handler, 'worker.handle: handler');
    checkFunction(fn, 'worker.handle: fn');
    const o = checkKnownOptions(options, ['transactional'], 'worker.handle');
    const transactional = o.transactional === undefined ? false : checkBoolean(o.transactional, 'worker.handle: transactional');
    if (this.#handlers.has(handler)) throw new Error(`worker.handle(): "${handler}" already has a handler`);
    this.#handlers.set(handler, { fn, transactional });
    return this;
  }

  // Checks the setup (see preflight.js), connects the listener and starts claiming.
  // Rejects, having closed what it opened, when relaybus cannot be used as configured.
  start() {
    if (this.#state !== 'new') return Promise.reject(new Error(`worker.start(): the worker is already ${this.#state}`));
    if (this.#handlers.size === 0) {
      return Promise.reject(new TypeError('worker.start(): no handlers; call worker.handle(name, fn) first'));
    }
    this.#state = 'starting';
    this.#starting = this.#start();
    return this.#starting;
  }

  async #start() {
    const o = this.#o;
    if (o.pool) {
      this.#pool = o.pool;
    } else {
      this.#pool = new pg.Pool({
        ...(o.connectionString !== undefined ? { connectionString: o.connectionString } : {}),
        fallback_application_name: `relaybus-worker:${o.name}`.slice(0, 63),
        max: o.concurrency + 3,
        ...o.poolConfig,
      });
      this.#ownsPool = true;
      // An idle connection that breaks (a server restart) is dropped by the pool; without
      // a listener its 'error' would end the process. It stays attached after stop(),
      // because end() resolves before the sockets are closed.
      this.#pool.on('error', (err) => this.#log.warn(`an idle connection of the pool failed: ${err.message}`));
      // pg-pool's end() resolves once no client is in its list, which is before their
      // sockets closed; stop() waits for the 'remove' of each, so that it returns with
      // every connection gone.
      this.#pool.on('connect', () => {
        this.#connections += 1;
      });
      this.#pool.on('remove', () => {
        this.#connections -= 1;
        if (this.#connections === 0) this.#allClosed?.();
      });
    }
    const handlers = [...this.#handlers.keys()];
    try {
      const setup = await checkWorkerSetup(this.#pool, {
        name: o.name,
        lease: this.#leaseText,
        handlers,
        holder: this.#holder,
      });
      this.#database = setup.database;
      this.#user = setup.user;
    } catch (err) {
      this.#state = 'stopped';
      await this.#endPool();
      throw err;
    }

    this.#batcher = new CompletionBatcher({
      send: async (tokens) => (await this.#pool.query(COMPLETE_MANY, [tokens])).rows[0].n,
      maxBatch: o.completionBatchSize,
      delay: o.completionDelay,
      retryDelay: o.pollInterval,
      onSent: (tokens, completed, gaveUp) => this.#completionsSent(tokens, completed, gaveUp),
      onError: (err, n) => this.#report(err, `complete_many of ${n} deliveries`),
    });
    this.#renewer = new LeaseRenewer({
      renew: async () => (await this.#pool.query(EXTEND_LEASE, [o.name, this.#leaseText, this.#holder])).rows[0].n,
      lease: o.lease,
      holding: () => this.#inFlight > 0,
      onRenewed: (lanes) => {
        this.#stats.renewals += 1;
        if (lanes === 0 && this.#inFlight > 0) {
          this.#log.warn(`extend_lease renewed no lane while ${this.#inFlight} deliveries are in flight: ` +
            'their leases were taken over, and they will run again');
        }
      },
      onError: (err) => this.#report(err, 'extend_lease'),
    });
    if (o.listen) {
      this.#listener = new WakeupListener({
        newClient: () => this.#newListenClient(),
        onNotify: (handler) => {
          if (this.#handlers.has(handler)) {
            this.#stats.wakeups += 1;
            this.#wakeup.notify();
          }
        },
        onConnected: () => {
          this.#log.debug('listening for relaybus notifications');
          this.#wakeup.notify();
        },
        onLost: (err, { wasListening, retryIn }) => {
          const message = `the LISTEN connection ${wasListening ? 'was lost' : 'could not be made'} ` +
            `(${err.message}); polling every ${o.pollInterval} ms, reconnecting in ${retryIn} ms`;
          if (wasListening) this.#log.warn(message);
          else this.#log.debug(message);
        },
        checkInterval: o.listenCheckInterval,
        checkTimeout: Math.min(5000, o.listenCheckInterval),
        reconnectMin: Math.min(250, o.pollInterval),
        reconnectMax: Math.max(30000, o.pollInterval),
      });
      await this.#listener.start();
    }
    this.#renewer.start();
    this.#state = 'running';
    this.#loopDone = this.#claimLoop(handlers);
    if (o.handleSignals) this.#installSignalHandlers();
    this.#log.info(`worker ${o.name} started (holder ${this.#holder}) for ${handlers.join(', ')}`);
    return this;
  }

  #newListenClient() {
    const base = this.#ownsPool
      ? { ...(this.#o.connectionString !== undefined ? { connectionString: this.#o.connectionString } : {}), ...this.#o.poolConfig }
      : { ...this.#pool.options };
    return new pg.Client({
      ...base,
      fallback_application_name: `relaybus-listen:${this.#o.name}`.slice(0, 63),
      keepAlive: true,
    });
  }

  async #claimLoop(handlers) {
    const o = this.#o;
    while (this.#state === 'running') {
      const room = o.concurrency - this.#inFlight;
      if (room <= 0) {
        await this.#wakeup.wait(Infinity); // a settled delivery, or stop()
        continue;
      }
      const wanted = Math.min(o.batchSize, room);
      let rows;
      try {
        this.#stats.claims += 1;
        ({ rows } = await this.#pool.query(CLAIM, [o.name, wanted, this.#leaseText, handlers, this.#holder]));
      } catch (err) {
        this.#report(err, 'claim');
        await sleep(o.pollInterval, this.#lifetime.signal); // not the wake-up: a failing claim must not spin
        continue;
      }
      if (this.#state !== 'running') {
        // stop() began while the claim ran: give these back unstarted.
        if (rows.length > 0) await this.#release(rows.map((r) => r.lease_token), { once: true });
        break;
      }
      this.#stats.claimed += rows.length;
      this.#inFlight += rows.length;
      for (const row of rows) this.#begin(row);
      // A full batch suggests more is due: claim again. Otherwise wait for a notification,
      // a settled delivery (it may unblock the next one of its key) or the poll interval.
      if (rows.length < wanted) await this.#wakeup.wait(o.pollInterval);
    }
  }

  #settled(n) {
    this.#inFlight -= n;
    this.#wakeup.notify();
  }

  #begin(row) {
    const entry = {
      row,
      event: toEvent(row),
      phase: 'running', // then 'settling' once the handler returned or threw
      abandoned: false,
      controller: new AbortController(),
      client: null,
      done: null,
    };
    this.#running.add(entry);
    const handler = this.#handlers.get(row.handler);
    entry.done = (handler.transactional ? this.#runInTransaction(entry, handler.fn) : this.#run(entry, handler.fn))
      .catch((err) => this.#report(err, `delivery ${row.event_id} of ${row.handler}`))
      .finally(() => {
        this.#running.delete(entry);
        if (this.#running.size === 0) this.#batcher.flushNow();
      });
  }

  #context(entry, client) {
    const context = { signal: entry.controller.signal, worker: this };
    if (client) context.client = client;
    return context;
  }

  async #run(entry, fn) {
    try {
      await fn(entry.event, this.#context(entry));
    } catch (err) {
      if (!entry.abandoned) await this.#failed(entry, err);
      return;
    }
    if (entry.abandoned) return; // stop() released it; what it returned no longer counts
    entry.phase = 'settling';
    this.#stats.succeeded += 1;
    this.#batcher.add(entry.row.lease_token);
  }

  async #runInTransaction(entry, fn) {
    const token = entry.row.lease_token;
    let client;
    try {
      client = await this.#pool.connect();
    } catch (err) {
      this.#report(err, 'connect for a transactional handler');
      if (!entry.abandoned) {
        entry.phase = 'settling';
        await this.#release([token]);
        this.#settled(1);
      }
      return;
    }
    if (entry.abandoned) {
      client.release();
      return;
    }
    entry.client = client;
    let broken = false;
    try {
      await client.query('BEGIN');
      await fn(entry.event, this.#context(entry, client));
      if (entry.abandoned) return;
      entry.phase = 'settling';
      const { rows: [r] } = await client.query(COMPLETE, [token]);
      if (r.ok) {
        await client.query('COMMIT');
        this.#stats.succeeded += 1;
        this.#stats.completed += 1;
      } else {
        // The lane was taken over: another attempt runs (or ran) the delivery, so this
        // one's writes must not stay.
        await client.query('ROLLBACK');
        this.#stats.lost += 1;
        this.#log.warn(`delivery ${entry.event.id} of ${entry.event.handler}: lease lost; its transaction was rolled back`);
      }
      this.#settled(1);
    } catch (err) {
      if (entry.abandoned) return; // stop() destroyed the connection and released the token
      entry.phase = 'settling';
      try {
        await client.query('ROLLBACK');
      } catch {
        broken = true;
      }
      // The handler threw, or complete/COMMIT failed (a deferred constraint, a
      // serialization failure): either way the attempt failed and nothing of it stays.
      await this.#failed(entry, err);
    } finally {
      if (!entry.abandoned) client.release(broken);
    }
  }

  #permanent(err) {
    if (err instanceof BuryError) return true;
    if (!this.#o.isPermanent) return false;
    try {
      return this.#o.isPermanent(err) === true;
    } catch (classifyErr) {
      this.#report(classifyErr, 'isPermanent');
      return false;
    }
  }

  async #failed(entry, err) {
    entry.phase = 'settling';
    const { event } = entry;
    const token = event.leaseToken;
    const text = errorText(err);
    const bury = this.#permanent(err);
    let outcome;
    try {
      outcome = await this.#retrying(bury ? 'bury' : 'fail', async () => {
        if (bury) return (await this.#pool.query(BURY, [token, text])).rows[0].ok ? 'dead' : 'lost';
        return (await this.#pool.query(FAIL, [token, text])).rows[0].outcome;
      });
    } finally {
      this.#settled(1);
    }
    if (outcome === undefined) return; // gave up at shutdown; reported already
    this.#stats.failed += 1;
    if (outcome === 'dead') this.#stats.dead += 1;
    if (outcome === 'lost') this.#stats.lost += 1;
    this.#log.debug(`delivery ${event.id} of ${event.handler} failed (${outcome}): ${text}`);
    this.#emitSafely('failed', event, err, outcome);
    if (outcome === 'dead') {
      this.#log.info(`delivery ${event.id} of ${event.handler} is a dead letter: ${text}`);
      this.#emitSafely('dead', event, err);
    }
  }

  #completionsSent(tokens, completed, gaveUp) {
    if (!gaveUp) {
      this.#stats.completeStatements += 1;
      this.#stats.completed += completed;
      if (completed < tokens.length) {
        this.#stats.lost += tokens.length - completed;
        this.#log.warn(`${tokens.length - completed} of ${tokens.length} completions found their lease lost: ` +
          'those deliveries were taken over and run again');
      }
    } else {
      this.#log.error(`${tokens.length} completions could not be sent; those deliveries run again after their lease expires`);
    }
    this.#settled(tokens.length);
  }

  // Runs a statement that ends attempts until it succeeds: its deliveries stay in flight
  // (and their lanes renewed) meanwhile. In shutdown's last phase, one final try.
  async #retrying(what, fn) {
    for (;;) {
      const last = this.#closing;
      try {
        return await fn();
      } catch (err) {
        this.#report(err, what);
        if (last) return undefined;
        await sleep(this.#o.pollInterval, this.#lifetime.signal);
      }
    }
  }

  // Gives deliveries back uncharged. `once`: a single try (a shutdown cannot wait for the
  // database to come back; the leases then expire and the deliveries are taken over).
  async #release(tokens, { once = false } = {}) {
    const send = async () => (await this.#pool.query(RELEASE_MANY, [tokens])).rows[0].n;
    let n;
    if (once) {
      try {
        n = await send();
      } catch (err) {
        this.#report(err, `release of ${tokens.length} deliveries`);
      }
    } else {
      n = await this.#retrying(`release of ${tokens.length} deliveries`, send);
    }
    if (n !== undefined) this.#stats.released += n;
  }

  // Graceful shutdown: stop claiming; let running handlers finish within `timeout` ms
  // (default shutdownTimeout), then abort their signal and release their deliveries
  // uncharged; send the queued completions; relinquish the lanes; end the pool the worker
  // made. Idempotent: every call returns the same promise. Always resolves; problems on
  // the way are reported as 'error' events (or logged).
  stop({ timeout } = {}) {
    if (!this.#stopping) this.#stopping = this.#stop(timeout ?? this.#o.shutdownTimeout);
    return this.#stopping;
  }

  async #stop(timeout) {
    if (this.#state === 'new') {
      this.#state = 'stopped';
      return;
    }
    if (this.#state === 'starting') await this.#starting.catch(() => {});
    if (this.#state === 'stopped') return; // start() failed and cleaned up
    this.#state = 'stopping';
    this.#log.info(`worker ${this.#o.name} stopping`);
    this.#wakeup.notify();
    await this.#loopDone;

    const running = [...this.#running];
    if (!(await settledWithin(running.map((e) => e.done), timeout))) {
      const abandoned = [...this.#running].filter((e) => e.phase === 'running');
      for (const entry of abandoned) {
        entry.abandoned = true;
        entry.controller.abort(new Error('the worker is stopping'));
        this.#running.delete(entry);
      }
      await this.#rollBackAbandoned(abandoned.filter((e) => e.client));
      if (abandoned.length > 0) {
        this.#log.warn(`${abandoned.length} handlers still running after ${timeout} ms; releasing their deliveries`);
        await this.#release(abandoned.map((e) => e.event.leaseToken), { once: true });
        this.#settled(abandoned.length);
      }
    }
    this.#closing = true;
    this.#lifetime.abort();
    await Promise.allSettled([...this.#running].map((e) => e.done));
    await this.#batcher.close();
    this.#renewer.stop();
    try {
      const { rows: [r] } = await this.#pool.query(RELINQUISH, [this.#o.name, this.#holder]);
      this.#log.debug(`relinquished ${r.n} lanes`);
    } catch (err) {
      this.#report(err, 'relinquish');
    }
    if (this.#listener) await this.#listener.stop();
    this.#removeSignalHandlers();
    await this.#endPool();
    this.#state = 'stopped';
    this.#log.info(`worker ${this.#o.name} stopped`);
    this.#emitSafely('stopped');
  }

  // An abandoned transactional handler's transaction must not linger: its connection is
  // closed (the server rolls the transaction back), but a backend busy in a statement only
  // notices that when the statement ends, so the statement is cancelled first.
  async #rollBackAbandoned(entries) {
    if (entries.length === 0) return;
    const pids = entries.map((e) => e.client.processID).filter((pid) => Number.isInteger(pid));
    try {
      if (pids.length > 0) await this.#pool.query(CANCEL_BACKENDS, [pids]);
    } catch (err) {
      this.#report(err, 'cancelling abandoned handlers\' statements');
    }
    for (const entry of entries) entry.client.release(true);
  }

  async #endPool() {
    if (!this.#ownsPool || !this.#pool) return;
    const closed = new Promise((resolve) => {
      this.#allClosed = resolve;
    });
    try {
      await this.#pool.end();
    } catch (err) {
      this.#report(err, 'ending the pool');
    }
    if (this.#connections > 0) {
      let timer;
      await Promise.race([closed, new Promise((resolve) => { timer = setTimeout(resolve, 2000); })]);
      clearTimeout(timer);
    }
  }

  // SIGINT/SIGTERM: a graceful stop(). A second signal during the stop gives up on it and
  // lets the signal do what it would have done without us (end the process).
  #installSignalHandlers() {
    const onSignal = (signal) => {
      if (this.#stopping) {
        this.#removeSignalHandlers();
        process.kill(process.pid, signal);
        return;
      }
      this.#log.info(`received ${signal}; stopping (send it again to exit at once)`);
      this.stop();
    };
    this.#signalHandlers = { SIGINT: onSignal, SIGTERM: onSignal };
    for (const [signal, fn] of Object.entries(this.#signalHandlers)) process.on(signal, fn);
  }

  #removeSignalHandlers() {
    if (!this.#signalHandlers) return;
    for (const [signal, fn] of Object.entries(this.#signalHandlers)) process.off(signal, fn);
    this.#signalHandlers = null;
  }

  // Infrastructure errors go to 'error' listeners when there are any: an EventEmitter
  // 'error' without a listener would throw and end the process over a transient outage.
  #report(err, operation) {
    const explained = explainDatabaseError(err, { role: ROLE, user: this.#user, database: this.#database });
    if (this.listenerCount('error') > 0) {
      this.#emitSafely('error', explained, { operation });
    } else {
      this.#log.error(`${operation} failed: ${explained?.message ?? explained}`);
    }
  }

  #emitSafely(name, ...args) {
    try {
      this.emit(name, ...args);
    } catch (err) {
      this.#log.error(`a listener of '${name}' threw: ${err?.stack ?? err}`);
    }
  }
}


