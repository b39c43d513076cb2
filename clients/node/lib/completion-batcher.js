// Groups successful completions into relaybus.complete_many statements. A quick handler
// finishes in microseconds; one complete per delivery would cost more round trips than the
// claim saved. Tokens are sent when `maxBatch` are queued, after `delay` ms, or at once
// when flushNow() says no handler is left running (waiting would then group nothing more
// and only delay the next claim). Tokens that arrive while a statement is out go in the
// next one, right after it: one statement at a time, so batches grow with load.
//
// A statement that fails is retried after `retryDelay` until close(): the tokens stay valid
// (complete works after the lease expired, as long as nobody took the lane over), and
// while they are unsent their deliveries stay counted as in flight, which keeps the lease
// renewed. close() makes one last attempt and then gives up; those deliveries run again
// once their lease expires (at-least-once).

import { sleep } from './wakeup.js';

export class CompletionBatcher {
  #send;
  #maxBatch;
  #delay;
  #retryDelay;
  #onSent;
  #onError;
  #queue = [];
  #timer = null;
  #running = null;
  #closing = false;
  #closed = new AbortController();

  // send(tokens) -> Promise<number completed>; onSent(tokens, completed) after each
  // statement (or give-up, with completed = 0); onError(err) for a failed statement.
  constructor({ send, maxBatch, delay, retryDelay, onSent, onError }) {
    this.#send = send;
    this.#maxBatch = maxBatch;
    this.#delay = delay;
    this.#retryDelay = retryDelay;
    this.#onSent = onSent;
    this.#onError = onError;
  }

  get queued() {
    return this.#queue.length;
  }

  add(token) {
    this.#queue.push(token);
    if (this.#queue.length >= this.#maxBatch || this.#delay === 0) this.#kick();
    else if (!this.#timer && !this.#running) {
      this.#timer = setTimeout(() => this.#kick(), this.#delay);
    }
  }

  flushNow() {
    if (this.#queue.length > 0) this.#kick();
  }

  // Sends everything queued (one last attempt for a failing statement) and resolves when
  // nothing is left.
  async close() {
    this.#closing = true;
    this.#closed.abort();
    this.#kick();
    while (this.#running) await this.#running;
  }

  #kick() {
    if (this.#timer) {
      clearTimeout(this.#timer);
      this.#timer = null;
    }
    if (!this.#running && this.#queue.length > 0) {
      this.#running = this.#drain().finally(() => {
        this.#running = null;
      });
    }
  }

  async #drain() {
    while (this.#queue.length > 0) {
      const batch = this.#queue.splice(0, this.#maxBatch);
      for (;;) {
        const closing = this.#closing;
        try {
          const completed = await this.#send(batch);
          this.#onSent(batch, completed);
          break;
        } catch (err) {
          this.#onError(err, batch.length);
          if (closing) {
            this.#onSent(batch, 0, err);
            break;
          }
          await sleep(this.#retryDelay, this.#closed.signal);
        }
      }
    }
  }
}
