// The Worker: claims deliveries for its registered handlers, runs them with a concurrency
// limit and ends each attempt. It wires together the pieces in this directory:
//
//   claim loop (here)      relaybus.claim with the handlers, this instance's holder and the
//                          lease; claims only up to the free capacity, so every claimed
//                          delivery starts at once; waits for a notification, a settled
//                          delivery or the poll interval when there is nothing to claim;
//                          a claim a notification causes comes at least wakeupInterval
//                          after the previous one began
//   Attempts               runs the handlers and ends each attempt (fail, bury, release)
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

import { Attempts } from './attempts.js';
import { CompletionBatcher } from './completion-batcher.js';
import { explainDatabaseError } from './errors.js';
import { makeHolder } from './holder.js';
import { LeaseRenewer } from './lease-renewer.js';
import { checkWorkerSetup, claimsRenewHeldLanes } from './preflight.js';
import { stopOnSignals } from './signals.js';
import { CLAIM, COMPLETE_MANY, EXTEND_LEASE, RELINQUISH } from './sql.js';
import { checkBoolean, checkFunction, checkKnownOptions, checkName, interval } from './validate.js';
import { Wakeup, sleep } from './wakeup.js';
import { WakeupListener } from './wakeup-listener.js';
import { workerOptions } from './worker-options.js';

const RIGHT = 'worker';

// pg waits for a connection without limit by default: against a server that accepts TCP
// connections and never answers, a claim (and start() and stop() with it) would never
// return. poolConfig overrides both, for the pool the worker makes and the LISTEN client.
const CONNECTION_TIMEOUT = 10000;
// How long stop() waits for each step after the handlers (the last statements, relinquish,
// the pool's end) when the database does not answer: then the leases expire instead.
const CLOSE_STEP_TIMEOUT = 1000;
const END_POOL_TIMEOUT = 1000;

// Resolves true when `promise` settled within `ms`, false otherwise (it keeps running).
function settlesWithin(promise, ms) {
  let timer;
  return Promise.race([
    Promise.resolve(promise).then(() => true, () => true),
    new Promise((resolve) => {
      timer = setTimeout(() => resolve(false), ms);
    }),
  ]).finally(() => clearTimeout(timer));
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
  #version = null;
  // Whether this database's claims renew the lanes the worker holds (they name every
  // handler it runs), and when the latest such claim began (performance.now()).
  #claimsRenew = false;
  #lanesRenewedAt = -Infinity;

  #wakeup = new Wakeup();
  #lastClaim = -Infinity; // performance.now() when the latest claim began
  #inFlight = 0;
  #loopDone = null;
  #closing = false; // shutdown's last phase: retries get one final try
  #lifetime = new AbortController(); // aborted then, ending retry sleeps

  #batcher = null;
  #renewer = null;
  #listener = null;
  #attempts = null;
  #removeSignalHandlers = null;
  #failing = new Map(); // operation -> the error last logged for it, while it keeps failing
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
        connectionTimeoutMillis: CONNECTION_TIMEOUT,
        keepAlive: true,
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
      this.#version = setup.version;
      this.#claimsRenew = claimsRenewHeldLanes(setup.version);
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
    this.#attempts = new Attempts({
      pool: this.#pool,
      batcher: this.#batcher,
      stats: this.#stats,
      log: this.#log,
      settled: (n) => this.#settled(n),
      report: (err, operation, how) => this.#report(err, operation, how),
      emit: (name, ...args) => this.#emitSafely(name, ...args),
      isPermanent: o.isPermanent,
      retryDelay: o.pollInterval,
      closing: () => this.#closing,
      lifetime: this.#lifetime.signal,
      worker: this,
    });
    this.#renewer = new LeaseRenewer({
      renew: async () => (await this.#pool.query(EXTEND_LEASE, [o.name, this.#leaseText, this.#holder])).rows[0].n,
      lease: o.lease,
      holding: () => this.#inFlight > 0,
      renewedAt: () => this.#lanesRenewedAt,
      onRenewed: (lanes) => {
        this.#recovered('extend_lease');
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
            this.#wakeup.notify('notification');
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
    if (o.handleSignals) this.#removeSignalHandlers = stopOnSignals(() => this.stop(), this.#log);
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
      connectionTimeoutMillis: base.connectionTimeoutMillis ?? CONNECTION_TIMEOUT,
      keepAlive: base.keepAlive ?? true,
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
        this.#wakeup.clear(); // what woke it so far, this claim answers
        this.#lastClaim = performance.now();
        ({ rows } = await this.#pool.query(CLAIM, [o.name, wanted, this.#leaseText, handlers, this.#holder]));
        if (this.#claimsRenew) this.#lanesRenewedAt = this.#lastClaim;
        this.#recovered('claim');
      } catch (err) {
        this.#report(err, 'claim');
        await sleep(o.pollInterval, this.#lifetime.signal); // not the wake-up: a failing claim must not spin
        continue;
      }
      if (this.#state !== 'running') {
        // stop() began while the claim ran: give these back unstarted.
        if (rows.length > 0) await this.#attempts.release(rows.map((r) => r.lease_token), { once: true });
        break;
      }
      this.#stats.claimed += rows.length;
      this.#inFlight += rows.length;
      for (const row of rows) this.#attempts.begin(row, this.#handlers.get(row.handler));
      // A full batch suggests more is due: claim again. Otherwise wait for a notification,
      // a settled delivery (it may unblock the next one of its key) or the poll interval.
      if (rows.length < wanted) {
        const why = await this.#wakeup.wait(o.pollInterval);
        if (why === 'notification') await this.#spaceOutWakeup();
      }
    }
  }

  // Every role may NOTIFY any channel, so a notification may come from anyone who can
  // connect: the claim it causes starts no sooner than wakeupInterval after the previous
  // one began. It is not dropped, only delayed; and every notification heard until that
  // claim begins counts as one, since the claim answers them all.
  async #spaceOutWakeup() {
    const wait = this.#lastClaim + this.#o.wakeupInterval - performance.now();
    if (wait > 0) await sleep(wait, this.#lifetime.signal);
  }

  #settled(n) {
    this.#inFlight -= n;
    this.#wakeup.notify();
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
    // A claim in progress normally ends in milliseconds; one waiting for a database that
    // does not answer is not waited for beyond the timeout. What it claims if it ever
    // returns is released (the loop gives back rows claimed while stopping), or run again
    // once the lease expires.
    const deadline = Date.now() + timeout;
    if (!(await settlesWithin(this.#loopDone, timeout))) {
      this.#log.warn(`the claim in progress did not end within ${timeout} ms (the database does not answer?); ` +
        'stopping without it: what it claims runs again once the lease expires');
    }

    if (!(await this.#attempts.settleWithin(Math.max(0, deadline - Date.now())))) {
      const abandoned = await this.#attempts.abandon();
      if (abandoned > 0) {
        this.#log.warn(`${abandoned} ${abandoned === 1 ? 'handler was' : 'handlers were'} still running after ` +
          `${timeout} ms; ${abandoned === 1 ? 'its delivery was' : 'their deliveries were'} released`);
      }
    }
    this.#closing = true;
    this.#lifetime.abort();
    // Each statement left gets one last try; against a database that does not answer they
    // are not waited for (their deliveries run again once the lease expires).
    if (!(await settlesWithin(this.#attempts.settle(), CLOSE_STEP_TIMEOUT))) {
      this.#log.warn(`ending the failed attempts did not finish within ${CLOSE_STEP_TIMEOUT} ms; stopping without it`);
    }
    if (!(await settlesWithin(this.#batcher.close(), CLOSE_STEP_TIMEOUT))) {
      this.#log.warn(`sending the completions did not finish within ${CLOSE_STEP_TIMEOUT} ms; stopping without it`);
    }
    this.#renewer.stop();
    const relinquish = this.#pool.query(RELINQUISH, [this.#o.name, this.#holder]).then(
      ({ rows: [r] }) => this.#log.debug(`relinquished ${r.n} lanes`),
      (err) => this.#report(err, 'relinquish'),
    );
    if (!(await settlesWithin(relinquish, CLOSE_STEP_TIMEOUT))) {
      this.#log.warn(`relinquish did not answer within ${CLOSE_STEP_TIMEOUT} ms; the lanes are taken over once their lease expires`);
    }
    if (this.#listener) await this.#listener.stop();
    this.#removeSignalHandlers?.();
    await this.#endPool();
    this.#state = 'stopped';
    this.#log.info(`worker ${this.#o.name} stopped`);
    this.#emitSafely('stopped');
  }

  async #endPool() {
    if (!this.#ownsPool || !this.#pool) return;
    const closed = new Promise((resolve) => {
      this.#allClosed = resolve;
    });
    // end() waits for every client, a connection still being made included: bounded, for a
    // database that does not answer (those connections then fail by their connect timeout).
    const deadline = Date.now() + END_POOL_TIMEOUT;
    const ending = this.#pool.end().catch((err) => this.#report(err, 'ending the pool'));
    if (!(await settlesWithin(ending, END_POOL_TIMEOUT))) {
      this.#log.warn(`the pool did not end within ${END_POOL_TIMEOUT} ms; connections still being made close on their own`);
      return;
    }
    if (this.#connections > 0) await settlesWithin(closed, Math.max(0, deadline - Date.now()));
  }

  // Infrastructure errors go to 'error' listeners when there are any: an EventEmitter
  // 'error' without a listener would throw and end the process over a transient outage.
  // Logged instead, a statement that keeps failing the same way (a claim every poll
  // interval while the database is down) is logged as an error once, then at debug level
  // until it succeeds again. A `permanent` error (one not retried) is only emitted here:
  // the caller logs it at error level, with what it does instead.
  #report(err, operation, { permanent = false } = {}) {
    const explained = explainDatabaseError(err, { right: RIGHT, user: this.#user, database: this.#database, version: this.#version });
    if (this.listenerCount('error') > 0) {
      this.#emitSafely('error', explained, { operation });
      return;
    }
    if (permanent) return;
    const text = `${operation} failed: ${explained?.message ?? explained}`;
    if (this.#failing.get(operation) === text) {
      this.#log.debug(`${text} (again)`);
    } else {
      this.#failing.set(operation, text);
      this.#log.error(text);
    }
  }

  #recovered(operation) {
    if (this.#failing.delete(operation)) this.#log.info(`${operation} works again`);
  }

  #emitSafely(name, ...args) {
    try {
      this.emit(name, ...args);
    } catch (err) {
      this.#log.error(`a listener of '${name}' threw: ${err?.stack ?? err}`);
    }
  }
}


