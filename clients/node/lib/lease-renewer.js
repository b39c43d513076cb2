// Renews the worker's lanes (relaybus.extend_lease with its holder) every third of the
// lease while it has deliveries in flight, so a handler that runs longer than the lease
// keeps its lanes: nobody takes them over, charges an attempt and runs the delivery twice.
// An idle worker renews nothing and its lanes may lapse, which frees them for others. Two
// renewals never overlap; a slow one delays the next instead.
export class LeaseRenewer {
  #renew;
  #every;
  #holding;
  #onRenewed;
  #onError;
  #timer = null;
  #busy = false;

  // renew() -> Promise<number of lanes renewed>; holding() -> true while deliveries are in
  // flight; onRenewed(lanes) after each renewal; onError(err) for a failed one.
  constructor({ renew, lease, holding, onRenewed, onError }) {
    this.#renew = renew;
    this.#every = Math.max(1, Math.floor(lease / 3));
    this.#holding = holding;
    this.#onRenewed = onRenewed;
    this.#onError = onError;
  }

  start() {
    if (this.#timer) return;
    this.#timer = setInterval(() => this.#tick(), this.#every);
    // The claim loop keeps the process alive while the worker runs; this timer need not.
    this.#timer.unref();
  }

  stop() {
    if (this.#timer) clearInterval(this.#timer);
    this.#timer = null;
  }

  async #tick() {
    if (this.#busy || !this.#holding()) return;
    this.#busy = true;
    try {
      this.#onRenewed(await this.#renew());
    } catch (err) {
      this.#onError(err);
    } finally {
      this.#busy = false;
    }
  }
}
