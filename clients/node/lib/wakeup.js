// A one-slot wake-up for the claim loop: notify() ends the current wait(), or, when nobody
// waits, makes the next wait() return at once. So a notification, or a settled delivery,
// that arrives while a claim statement is running is never lost.
export class Wakeup {
  #pending = false;
  #resolve = null;

  notify() {
    this.#pending = true;
    const resolve = this.#resolve;
    if (resolve) {
      this.#resolve = null;
      resolve(true);
    }
  }

  // Resolves true when notified, false when `ms` ran out (Infinity: no timeout).
  wait(ms) {
    if (this.#pending) {
      this.#pending = false;
      return Promise.resolve(true);
    }
    return new Promise((resolve) => {
      const timer = ms === Infinity ? null : setTimeout(() => {
        this.#resolve = null;
        resolve(false);
      }, ms);
      this.#resolve = (woken) => {
        if (timer) clearTimeout(timer);
        this.#pending = false;
        resolve(woken);
      };
    });
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
