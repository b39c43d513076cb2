// Type declarations for the relaybus package (hand-written; the code is plain ES modules).
// pg's own types are not required: the client and pool parameters are described by the
// few members this package uses, so a pg Client, PoolClient or Pool fits them whether or
// not @types/pg is installed (test/types/usage.ts checks them against @types/pg).

import { EventEmitter } from 'node:events';

/** Anything with pg's promise query method: a pg Client or PoolClient. */
export interface Queryable {
  query(text: string, values?: unknown[]): Promise<{ rows: any[]; rowCount: number | null }>;
}

/** A pg.Pool, as far as the Worker uses it. */
export interface PoolLike extends Queryable {
  connect(): Promise<Queryable & { release(destroy?: boolean | Error): void; processID?: number | null }>;
  end(): Promise<void>;
  options?: object;
}

/** A JSON object: relaybus payloads and headers must be objects. */
export type JsonObject = { [key: string]: unknown };

export interface PublishOptions {
  /** Ordering key: events of one key run in commit order for each handler. */
  key?: string | null;
  /** Event id (for example a broker's message id); default a generated UUID. Idempotent. */
  id?: string | null;
  /** Send to exactly these handlers instead of the type's subscribers. */
  handlers?: string[] | null;
  /** Not due before this time. */
  availableAt?: Date | string | null;
  /** Handed to the worker unchanged. */
  headers?: JsonObject | null;
}

export interface BatchEvent extends PublishOptions {
  type: string;
  payload?: JsonObject;
}

/**
 * Publishes one event inside the caller's transaction on `client` (never commits) and
 * resolves to its id. Refuses a pg.Pool, which would publish outside the transaction.
 */
export function publish(client: Queryable, type: string, payload?: JsonObject, options?: PublishOptions): Promise<string>;

/** Publishes several events with one statement in the caller's transaction; ids in input order. */
export function publishBatch(client: Queryable, events: BatchEvent[]): Promise<string[]>;

export interface SubscribeOptions {
  /** Attempts before a delivery is dead-lettered (default 25). */
  maxAttempts?: number;
  /** Backoff after the first failure, in ms (default 1000); doubles up to backoffMax. */
  backoffBase?: number;
  /** Longest backoff, in ms (default 1 hour). */
  backoffMax?: number;
}

/** relaybus.subscribe for an external handler (needs the admin right: relaybus.grant_rights(role, 'admin')). For setup scripts and tests. */
export function subscribe(client: Queryable, handler: string, eventTypes: string[], options?: SubscribeOptions): Promise<void>;

/** A delivery, as a handler receives it. */
export interface RelaybusEvent<P = any> {
  id: string;
  handler: string;
  type: string;
  key: string | null;
  payload: P;
  headers: JsonObject | null;
  /** Attempts charged before this one: 0 on the first try. */
  attempts: number;
  publishedAt: Date;
  /** The attempt's lease token (complete/fail/release take it); the worker ends the attempt itself. */
  leaseToken: string;
}

export interface HandlerContext {
  /** Aborted when stop() gives up waiting for this handler; its delivery is then released. */
  signal: AbortSignal;
  worker: Worker;
}

export interface TransactionalContext<C = any> extends HandlerContext {
  /**
   * The pool client whose open transaction also completes the delivery: write through it,
   * and never COMMIT or ROLLBACK it yourself. Typed `any` unless you pass a type.
   */
  client: C;
}

export type Handler<P = any> = (event: RelaybusEvent<P>, context: HandlerContext) => unknown;
export type TransactionalHandler<P = any, C = any> = (event: RelaybusEvent<P>, context: TransactionalContext<C>) => unknown;

export interface Logger {
  debug?(...args: unknown[]): void;
  info?(...args: unknown[]): void;
  warn?(...args: unknown[]): void;
  error?(...args: unknown[]): void;
}

export interface WorkerOptions {
  /** The worker's name (lease_owner in relaybus.lanes); a service name is fine. */
  name: string;
  /** Connection string for the pool the worker makes (else the PG* environment variables). */
  connectionString?: string;
  /**
   * More pg.Pool settings for that pool and the LISTEN connection (max, idleTimeoutMillis,
   * host, ...). Defaults: max concurrency + 3, connectionTimeoutMillis 10000, keepAlive true.
   */
  poolConfig?: Record<string, unknown>;
  /** An existing pg.Pool to run on instead; stop() does not end it. */
  pool?: PoolLike;
  /** Most deliveries in flight (claimed, not yet ended) at once. Default 10. */
  concurrency?: number;
  /** Most deliveries one claim asks for. Default: concurrency. */
  batchSize?: number;
  /** Lease in ms (100 ms to 1 day), renewed every third of it while anything runs. Default 30000. */
  lease?: number;
  /** Longest wait between claims when idle, in ms. Default 1000. */
  pollInterval?: number;
  /** Least time in ms from one claim to the next that a notification causes (anyone who can connect may NOTIFY). Default 1. */
  wakeupInterval?: number;
  /** Most completions in one complete_many. Default 100. */
  completionBatchSize?: number;
  /** Longest a completion waits for others to join its batch, in ms. Default 2. */
  completionDelay?: number;
  /** How long stop() lets running handlers (and a claim in progress) finish, in ms. Default 10000. */
  shutdownTimeout?: number;
  /** LISTEN relaybus for wake-ups on a connection of its own. Default true. */
  listen?: boolean;
  /** Health check period of the LISTEN connection, in ms. Default 15000. */
  listenCheckInterval?: number;
  /** stop() on SIGINT/SIGTERM (a second signal exits at once). Default false. */
  handleSignals?: boolean;
  /** Console-like logger. Default: util.debuglog('relaybus') for debug/info, stderr for warn/error. */
  logger?: Logger;
  /** Errors for which this returns true are dead-lettered at once (bury) instead of retried. */
  isPermanent?: (err: unknown) => boolean;
}

export interface WorkerStats {
  claims: number;
  claimed: number;
  succeeded: number;
  failed: number;
  completed: number;
  completeStatements: number;
  dead: number;
  lost: number;
  released: number;
  renewals: number;
  wakeups: number;
  listenConnects: number;
}

export type FailOutcome = 'retry' | 'dead' | 'lost';

export interface WorkerEvents {
  /** An infrastructure error (a claim, renewal or completion statement failed). */
  error: [err: Error, context: { operation: string }];
  /** A handler's error was recorded: retried later, dead-lettered, or the lease was lost. */
  failed: [event: RelaybusEvent, err: unknown, outcome: FailOutcome];
  /** A delivery became a dead letter. */
  dead: [event: RelaybusEvent, err: unknown];
  stopped: [];
}

export class Worker extends EventEmitter {
  constructor(options: WorkerOptions);
  readonly name: string;
  /** This instance's holder, passed to every claim, renewal and relinquish. */
  readonly holder: string;
  /** The pool the worker runs on (null before start()). */
  readonly pool: PoolLike | null;
  readonly state: 'new' | 'starting' | 'running' | 'stopping' | 'stopped';
  readonly inFlight: number;
  readonly listening: boolean;
  readonly listenerPid: number | null;
  readonly stats: WorkerStats;

  handle<P = any>(handler: string, fn: Handler<P>, options?: { transactional?: false }): this;
  handle<P = any, C = any>(handler: string, fn: TransactionalHandler<P, C>, options: { transactional: true }): this;

  /** Checks the setup (rejects with a RelaybusError saying what to run) and starts claiming. */
  start(): Promise<this>;
  /** Graceful shutdown; idempotent; always resolves. */
  stop(options?: { timeout?: number }): Promise<void>;

  on<K extends keyof WorkerEvents>(event: K, listener: (...args: WorkerEvents[K]) => void): this;
  once<K extends keyof WorkerEvents>(event: K, listener: (...args: WorkerEvents[K]) => void): this;
  off<K extends keyof WorkerEvents>(event: K, listener: (...args: WorkerEvents[K]) => void): this;
}

/** Throw from a handler to dead-letter the delivery now instead of retrying it. */
export class BuryError extends Error {
  constructor(message?: string, options?: { cause?: unknown });
}

export type RelaybusErrorCode =
  | 'RELAYBUS_NOT_INSTALLED'
  | 'RELAYBUS_OUTDATED'
  | 'RELAYBUS_PERMISSION'
  | 'RELAYBUS_NOT_SUBSCRIBED';

/** A setup problem, with a message that says what to run. */
export class RelaybusError extends Error {
  readonly code: RelaybusErrorCode;
  /** The server's SQLSTATE when a database error was translated. */
  readonly sqlState?: string;
}

/** The parts of prom-client (passed in: relaybus does not depend on it) the metrics use. */
export interface PromClientLike {
  Counter: new (config: any) => unknown;
  Gauge: new (config: any) => unknown;
  register: unknown;
}

/**
 * Adds the worker's statistics to a prom-client registry (client.register unless given):
 * relaybus_worker_<field>_total counters and the relaybus_worker_in_flight gauge, labelled
 * with the worker's name, read at each scrape. One worker per name in a registry.
 */
export function registerWorkerMetrics(client: PromClientLike, worker: Worker, options?: { registry?: unknown }): void;
/** Takes the worker's statistics out of the registry. */
export function unregisterWorkerMetrics(client: PromClientLike, worker: Worker, options?: { registry?: unknown }): void;
