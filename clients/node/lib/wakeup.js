// A one-slot wake-up for the claim loop: notify() ends the current wait(), or, when nobody
// waits, makes the next wait() return at once. So a notification, or a settled delivery,
// that arrives while a claim statement is running is never lost. wait() tells why it
// ended: 'notification' when only notifications came (anyone who can connect may send
// one), 'work' when the worker's own news came too (a settled delivery, a reconnect,
// stop()), false when the time ran out.
export class Wakeup {
  #pending = null; // null, 'notification' or 'work'
  #resolve = null;

  notify(why = 'work') {
    if (this.#pending !== 'work') this.#pending = why;
    const resolve = this.#resolve;
    if (resolve) {
      this.#resolve = null;
      resolve();
    }
  }

  // Forgets what came so far: the claim about to start answers it.
  clear() {
    this.#pending = null;
  }

  // Resolves with why it was woken, or false when `ms` ran out (Infinity: no timeout).
  wait(ms) {
    if (this.#pending) return Promise.resolve(this.#take());
    return new Promise((resolve) => {
      const timer = ms === Infinity ? null : setTimeout(() => {
        this.#resolve = null;
        resolve(false);
      }, ms);
      this.#resolve = () => {
        if (timer) clearTimeout(timer);
        resolve(this.#take());
      };
    });
  }

  #take() {
    const why = this.#pending;
    this.#pending = null;
    return why;
  }
}

// Resolves after `ms`, or at once when `signal` is aborted; never keeps a stopped worker's
// process alive longer than that.
export function sleep(ms, signal) {
  return new Promise((resolve) => {
    if (signal?.aborted) return resolve();
    const timer = setTimeout(done, ms);
    function done() {
      clearTimeout(timer);
      signal?.removeEventListener('abort', done);
      resolve();
    }
    signal?.addEventListener('abort', done, { once: true });
  });
}

// Rejects with `message` if `promise` has not settled within `ms`.
export function withTimeout(promise, ms, message) {
  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(message)), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}
