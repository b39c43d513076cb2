// Runs claimed deliveries and ends their attempts: a handler that returns is completed
// (through the CompletionBatcher, or inside its own transaction for a transactional
// handler), one that throws is failed or buried. It knows which attempts are running, so
// that a shutdown can abandon the ones that overrun it and release their deliveries.
//
// Every attempt ends exactly once in the database, and settled(n) is called exactly once
// for it, when it has: that is the Worker's in-flight count. A statement that ends
// attempts is retried while it fails for a reason that can pass (a broken connection, a
// restarting server; the delivery stays in flight and its lane renewed meanwhile); once
// the shutdown is closing, it gets one last try. One the server refuses for good is not
// retried: a fail or bury is sent again without the error text, and when even that is
// refused the delivery is released, so that it never stays in flight (its key blocked,
// a slot of the concurrency used) for the worker's lifetime.

import { BuryError, errorText, isTransient } from './errors.js';
import { BURY, CANCEL_BACKENDS, COMPLETE, FAIL, RELEASE_MANY } from './sql.js';
import { sleep } from './wakeup.js';

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

export class Attempts {
  #pool;
  #batcher;
  #stats;
  #log;
  #settled;
  #report;
  #emit;
  #isPermanent;
  #retryDelay;
  #closing;
  #lifetime;
  #worker;
  #running = new Set(); // attempts whose handler, or the statement ending it, is not done

  // closing() is true in the shutdown's last phase; lifetime is aborted then, which ends
  // the sleeps between retries.
  constructor({ pool, batcher, stats, log, settled, report, emit, isPermanent, retryDelay, closing, lifetime, worker }) {
    this.#pool = pool;
    this.#batcher = batcher;
    this.#stats = stats;
    this.#log = log;
    this.#settled = settled;
    this.#report = report;
    this.#emit = emit;
    this.#isPermanent = isPermanent;
    this.#retryDelay = retryDelay;
    this.#closing = closing;
    this.#lifetime = lifetime;
    this.#worker = worker;
  }

  get running() {
    return this.#running.size;
  }

  // Starts the handler for a claimed delivery.
  begin(row, { fn, transactional }) {
    const attempt = {
      event: toEvent(row),
      phase: 'running', // 'settling' once the handler returned or threw
      abandoned: false,
      controller: new AbortController(),
      client: null, // a transactional handler's pool client
      done: null,
    };
    this.#running.add(attempt);
    attempt.done = (transactional ? this.#runInTransaction(attempt, fn) : this.#run(attempt, fn))
      .catch((err) => this.#report(err, `delivery ${row.event_id} of ${row.handler}`))
      .finally(() => {
        this.#running.delete(attempt);
        // Nothing else can join the completions' statement now: send it.
        if (this.#running.size === 0) this.#batcher.flushNow();
      });
  }

  // Resolves true when every running attempt ended within `ms`.
  async settleWithin(ms) {
    let timer;
    const timeout = new Promise((resolve) => {
      timer = setTimeout(() => resolve(false), ms);
    });
    try {
      const all = Promise.allSettled([...this.#running].map((a) => a.done)).then(() => true);
      return await Promise.race([all, timeout]);
    } finally {
      clearTimeout(timer);
    }
  }

  async settle() {
    await Promise.allSettled([...this.#running].map((a) => a.done));
  }

  // Gives up on the handlers still running (not those whose attempt is being ended): their
  // signal is aborted, what they return is ignored, a transactional one's statement is
  // cancelled and its connection closed (the server rolls the transaction back), and their
  // deliveries are released uncharged. Returns how many were abandoned.
  async abandon() {
    const abandoned = [...this.#running].filter((a) => a.phase === 'running');
    if (abandoned.length === 0) return 0;
    for (const attempt of abandoned) {
      attempt.abandoned = true;
      attempt.controller.abort(new Error('the worker is stopping'));
      this.#running.delete(attempt);
    }
    await this.#rollBack(abandoned.filter((a) => a.client));
    await this.release(abandoned.map((a) => a.event.leaseToken), { once: true });
    this.#settled(abandoned.length);
    return abandoned.length;
  }

  // Gives deliveries back uncharged. `once`: a single try (a shutdown cannot wait for the
  // database to come back; the leases then expire and the deliveries are taken over).
  async release(tokens, { once = false } = {}) {
    const what = `release of ${tokens.length} deliveries`;
    const send = async () => (await this.#pool.query(RELEASE_MANY, [tokens])).rows[0].n;
    let n;
    if (once) {
      try {
        n = await send();
      } catch (err) {
        this.#report(err, what);
      }
    } else {
      try {
        n = await this.#retrying(what, send);
      } catch (err) {
        this.#report(err, what, { permanent: true });
        this.#log.error(`${what} refused (${errorText(err)}); they run again once their lease expires`);
      }
    }
    if (n !== undefined) this.#stats.released += n;
  }

  #context(attempt, client) {
    const context = { signal: attempt.controller.signal, worker: this.#worker };
    if (client) context.client = client;
    return context;
  }

  async #run(attempt, fn) {
    try {
      await fn(attempt.event, this.#context(attempt));
    } catch (err) {
      if (!attempt.abandoned) await this.#failed(attempt, err);
      return;
    }
    if (attempt.abandoned) return; // released at shutdown; what it returned no longer counts
    attempt.phase = 'settling';
    this.#stats.succeeded += 1;
    this.#batcher.add(attempt.event.leaseToken);
  }

  async #runInTransaction(attempt, fn) {
    const token = attempt.event.leaseToken;
    let client;
    try {
      client = await this.#pool.connect();
    } catch (err) {
      this.#report(err, 'connect for a transactional handler');
      if (!attempt.abandoned) {
        attempt.phase = 'settling';
        await this.release([token]);
        this.#settled(1);
      }
      return;
    }
    if (attempt.abandoned) {
      client.release();
      return;
    }
    attempt.client = client;
    let broken = false;
    try {
      await client.query('BEGIN');
      await fn(attempt.event, this.#context(attempt, client));
      if (attempt.abandoned) return;
      attempt.phase = 'settling';
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
        this.#log.warn(`delivery ${attempt.event.id} of ${attempt.event.handler}: lease lost; its transaction was rolled back`);
      }
      this.#settled(1);
    } catch (err) {
      if (attempt.abandoned) return; // its connection was closed and its delivery released
      attempt.phase = 'settling';
      try {
        await client.query('ROLLBACK');
      } catch {
        broken = true;
      }
      // The handler threw, or complete/COMMIT failed (a deferred constraint, a
      // serialization failure): either way the attempt failed and nothing of it stays.
      await this.#failed(attempt, err);
    } finally {
      if (!attempt.abandoned) client.release(broken);
    }
  }

  // A backend busy in a statement notices its closed connection only when the statement
  // ends, so the statements are cancelled first (a role may cancel its own backends).
  async #rollBack(attempts) {
    if (attempts.length === 0) return;
    const pids = attempts.map((a) => a.client.processID).filter((pid) => Number.isInteger(pid));
    try {
      if (pids.length > 0) await this.#pool.query(CANCEL_BACKENDS, [pids]);
    } catch (err) {
      this.#report(err, "cancelling abandoned handlers' statements");
    }
    for (const attempt of attempts) attempt.client.release(true);
  }

  #permanent(err) {
    if (err instanceof BuryError) return true;
    if (!this.#isPermanent) return false;
    try {
      return this.#isPermanent(err) === true;
    } catch (classifyErr) {
      this.#report(classifyErr, 'isPermanent');
      return false;
    }
  }

  async #failed(attempt, err) {
    attempt.phase = 'settling';
    const { event } = attempt;
    const text = errorText(err);
    const bury = this.#permanent(err);
    let outcome;
    try {
      outcome = await this.#end(event, bury, text);
    } finally {
      this.#settled(1);
    }
    if (outcome === undefined || outcome === 'released') return; // gave up at shutdown, or refused; logged already
    this.#stats.failed += 1;
    if (outcome === 'dead') this.#stats.dead += 1;
    if (outcome === 'lost') this.#stats.lost += 1;
    // attempts=N as the API numbers them (the attempts charged before this one: 0 on a
    // first try), as the Python and C++ workers log them. A retry is a warning on one line,
    // a dead letter an error: someone must look at it. As with 'error', a listener of the
    // event ('failed', 'dead') takes it over, and the line goes to debug.
    const failed = `handler ${event.handler} failed on event ${event.id}, attempts=${event.attempts}`;
    const line = text.split('\n')[0];
    const level = (name, unheard) => (this.#worker.listenerCount(name) > 0 ? 'debug' : unheard);
    if (outcome === 'retry') this.#log[level('failed', 'warn')](`${failed}, will retry: ${line}`);
    else if (outcome === 'lost') {
      this.#log[level('failed', 'warn')](`${failed}, but the lease was already lost: ${line}`);
    }
    this.#emit('failed', event, err, outcome);
    if (outcome === 'dead') {
      this.#log[level('dead', 'error')](
        `${failed}, and it is dead (${bury ? 'buried' : 'max_attempts reached'}): ${line}`,
      );
      this.#emit('dead', event, err);
    }
  }

  // Sends fail (or bury) with the error text; when the server refuses that for good, again
  // without the text; when it refuses that too, releases the delivery. Resolves to fail's
  // outcome ('retry', 'dead', 'lost'), 'released', or undefined (gave up at shutdown).
  async #end(event, bury, text) {
    const token = event.leaseToken;
    const name = bury ? 'bury' : 'fail';
    const what = `${name} of delivery ${event.id} of ${event.handler}`;
    const send = (error) => this.#retrying(what, async () => {
      if (bury) return (await this.#pool.query(BURY, [token, error])).rows[0].ok ? 'dead' : 'lost';
      return (await this.#pool.query(FAIL, [token, error])).rows[0].outcome;
    });
    try {
      return await send(text);
    } catch (err) {
      this.#report(err, what, { permanent: true });
      this.#log.error(`${what} refused (${errorText(err)}); sending it again without the error text, which was: ${text}`);
    }
    try {
      return await send(null);
    } catch (err) {
      this.#report(err, what, { permanent: true });
      this.#log.error(`${what} refused again without the error text (${errorText(err)}); the delivery is released`);
    }
    await this.release([token]);
    return 'released';
  }

  // Runs fn until it succeeds, and resolves to its result: after an error that may pass
  // (see isTransient) it waits retryDelay and tries again; once the shutdown is closing it
  // makes one last try and resolves to undefined when that fails. Rejects with any other
  // error, at once: sending the same statement again would fail the same way.
  async #retrying(what, fn) {
    for (;;) {
      const last = this.#closing();
      try {
        return await fn();
      } catch (err) {
        if (!isTransient(err)) throw err;
        this.#report(err, what);
        if (last) return undefined;
        await sleep(this.#retryDelay, this.#lifetime);
      }
    }
  }
}
