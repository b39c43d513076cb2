// Renews the worker's lanes (relaybus.extend_lease with its holder) every third of the
// lease while it has deliveries in flight, so a handler that runs longer than the lease
// keeps its lanes: nobody takes them over, charges an attempt and runs the delivery twice.
// An idle worker renews nothing and its lanes may lapse, which frees them for others. Nor
// does a worker whose claims renewed its lanes within the last third (relaybus 0.3.0's
// claims renew the lanes they find held, to a lease from the claim's start): extend_lease
// would rewrite every lease row again, and under a held snapshot each rewrite stays as a
// dead version the next claims step over. Two renewals never overlap; a slow one delays the
// next instead.
export class LeaseRenewer {
  #renew;
  #every;
  #holding;
  #onRenewed;
  #onError;
  #renewedAt;
  #timer = null;
  #busy = false;

  // renew() -> Promise<number of lanes renewed>; holding() -> true while deliveries are in
  // flight; onRenewed(lanes) after each renewal; onError(err) for a failed one;
  // renewedAt() -> performance.now() when the latest claim that renewed every lane began.
  constructor({ renew, lease, holding, onRenewed, onError, renewedAt = () => -Infinity }) {
    this.#renew = renew;
    this.#every = Math.max(1, Math.floor(lease / 3));
    this.#holding = holding;
    this.#onRenewed = onRenewed;
    this.#onError = onError;
    this.#renewedAt = renewedAt;
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
    // A claim that began within the last third left every lane leased for at least two
    // thirds of the lease from now, as an extend_lease now would (for one lease).
    if (performance.now() - this.#renewedAt() < this.#every) return;
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
