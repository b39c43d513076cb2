// LISTEN relaybus on a connection of its own (not a pool's: a pool may close it, and
// through a transaction pooler LISTEN does not work at all). A publish that commits sends
// NOTIFY relaybus with the handler's name as payload; onNotify(handler) then ends the
// claim loop's poll wait early. Wake-ups only shorten waits: the poll interval remains the
// correctness path, so while this connection is down the worker just polls.
//
// A dead connection is noticed two ways: pg's 'error'/'end' events (the server closed it,
// or the socket broke), and a health check every `checkInterval` that must answer within
// `checkTimeout` (a connection can also die silently: a partition, a hung server). Then
// the socket is destroyed and a new connection is made after a delay that starts at
// `reconnectMin` and doubles up to `reconnectMax`. onConnected() runs after every
// (re)connect, because notifications sent while nobody listened are gone.

import { CHANNEL, LISTEN } from './sql.js';
import { withTimeout } from './wakeup.js';

export class WakeupListener {
  #newClient;
  #onNotify;
  #onConnected;
  #onLost;
  #checkInterval;
  #checkTimeout;
  #reconnectMin;
  #reconnectMax;
  #delay;
  #client = null;
  #checkTimer = null;
  #reconnectTimer = null;
  #stopped = false;
  #connecting = null;
  #pending = null; // the client being connected
  #connects = 0;

  constructor({ newClient, onNotify, onConnected, onLost, checkInterval, checkTimeout, reconnectMin, reconnectMax }) {
    this.#newClient = newClient;
    this.#onNotify = onNotify;
    this.#onConnected = onConnected;
    this.#onLost = onLost;
    this.#checkInterval = checkInterval;
    this.#checkTimeout = checkTimeout;
    this.#reconnectMin = reconnectMin;
    this.#reconnectMax = reconnectMax;
    this.#delay = reconnectMin;
  }

  get connected() {
    return this.#client !== null;
  }

  // The listening backend's process id, for monitoring (pg_stat_activity) and tests.
  get backendPid() {
    return this.#client?.processID ?? null;
  }

  // How many times a connection was established and is listening.
  get connects() {
    return this.#connects;
  }

  // Makes the first attempt; resolves either way (a failure schedules a retry).
  start() {
    this.#connecting = this.#connect();
    return this.#connecting;
  }

  async stop() {
    this.#stopped = true;
    clearTimeout(this.#checkTimer);
    clearTimeout(this.#reconnectTimer);
    // A connection still being made is not waited for: the server may never answer.
    // (pg may not notice the destroyed socket before its own connect timeout; #connect
    // closes the client if it ever connects, as the listener is stopped.)
    const pending = this.#pending;
    if (pending && !pending.relaybusDone) {
      pending.relaybusDone = true;
      destroy(pending);
    } else {
      await this.#connecting;
    }
    const client = this.#client;
    this.#client = null;
    if (client) {
      client.relaybusDone = true;
      try {
        await withTimeout(client.end(), 1000, 'closing the LISTEN connection timed out');
      } catch {
        destroy(client);
      }
    }
  }

  async #connect() {
    if (this.#stopped) return;
    const client = this.#newClient();
    this.#pending = client;
    client.on('error', (err) => this.#lost(client, err));
    client.on('end', () => this.#lost(client, new Error('the LISTEN connection ended')));
    client.on('notification', (msg) => {
      if (client === this.#client && msg.channel === CHANNEL) this.#onNotify(msg.payload);
    });
    try {
      await withTimeout(client.connect(), Math.max(this.#checkTimeout, 1000), 'connecting for LISTEN timed out');
      await withTimeout(client.query(LISTEN), this.#checkTimeout, 'LISTEN timed out');
    } catch (err) {
      this.#lost(client, err);
      return;
    } finally {
      if (this.#pending === client) this.#pending = null;
    }
    if (this.#stopped || client.relaybusDone) {
      if (!client.relaybusDone) {
        client.relaybusDone = true;
        destroy(client);
      }
      return;
    }
    this.#client = client;
    this.#connects += 1;
    this.#delay = this.#reconnectMin;
    this.#armCheck(client);
    this.#onConnected();
  }

  #armCheck(client) {
    this.#checkTimer = setTimeout(async () => {
      if (client !== this.#client) return;
      try {
        await withTimeout(client.query('SELECT 1'), this.#checkTimeout,
          `the LISTEN connection did not answer a health check within ${this.#checkTimeout} ms`);
      } catch (err) {
        this.#lost(client, err);
        return;
      }
      if (client === this.#client) this.#armCheck(client);
    }, this.#checkInterval);
    this.#checkTimer.unref();
  }

  #lost(client, err) {
    if (client.relaybusDone) return; // already handled (an 'error' is followed by 'end')
    client.relaybusDone = true;
    destroy(client);
    if (this.#stopped) return;
    const wasListening = client === this.#client;
    if (wasListening) {
      this.#client = null;
      clearTimeout(this.#checkTimer);
    }
    const delay = this.#delay;
    this.#delay = Math.min(this.#delay * 2, this.#reconnectMax);
    this.#onLost(err, { wasListening, retryIn: delay });
    clearTimeout(this.#reconnectTimer);
    this.#reconnectTimer = setTimeout(() => {
      this.#connecting = this.#connect();
    }, delay);
    this.#reconnectTimer.unref();
  }
}

// Closes the socket at once: end() would wait for a server that may never answer.
function destroy(client) {
  client.connection?.stream?.destroy();
  client.end().catch(() => {});
}
