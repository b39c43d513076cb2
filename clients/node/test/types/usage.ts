// Compiled (never run) by types.test.js: index.d.ts must accept the README's usage and
// reject the mistakes marked @ts-expect-error (tsc fails if such a line compiles cleanly).
import pg from 'pg';
import promClient from 'prom-client';
import { BuryError, RelaybusError, Worker, publish, publishBatch, registerWorkerMetrics, subscribe, unregisterWorkerMetrics, type RelaybusEvent } from 'relaybus';

declare const client: { query(text: string, values?: unknown[]): Promise<{ rows: any[]; rowCount: number | null }> };

async function usage(): Promise<void> {
  const id: string = await publish(client, 'order.placed', { orderId: 1 }, { key: 'order-1', availableAt: new Date() });
  const ids: string[] = await publishBatch(client, [{ type: 'a' }, { type: 'b', payload: { n: 1 }, key: 'k' }]);
  await subscribe(client, 'mailer', ['order.placed'], { maxAttempts: 5, backoffBase: 100 });

  const worker = new Worker({ connectionString: 'postgresql:///app', name: 'mailer-service', concurrency: 20, handleSignals: true });
  worker.handle<{ email: string }>('mailer', async (event, { signal }) => {
    const email: string = event.payload.email;
    if (signal.aborted || !email) throw new BuryError('no address');
  });
  worker.handle('ledger', async (event: RelaybusEvent, { client: tx }) => {
    await tx.query('INSERT INTO ledger VALUES ($1)', [event.id]);
  }, { transactional: true });
  worker.on('dead', (event, err) => console.log(event.id, event.attempts, err));
  worker.on('error', (err, { operation }) => console.log(operation, err.message));
  await worker.start();
  const completed: number = worker.stats.completed;
  await worker.stop({ timeout: 1000 });
  void id, ids, completed;

  try {
    await worker.start();
  } catch (err) {
    if (err instanceof RelaybusError && err.code === 'RELAYBUS_PERMISSION') console.log(err.message);
  }

  // pg's own types (@types/pg) fit the parameters.
  const pool = new pg.Pool({ max: 4 });
  const poolClient = await pool.connect();
  await publish(poolClient, 'x', {});
  await publish(new pg.Client(), 'x', {});
  const onPool = new Worker({ pool, name: 'w' });
  onPool.handle<{ a: number }, pg.PoolClient>('typed', async (event, { client: tx }) => {
    await tx.query('SELECT $1::int', [event.payload.a]);
  }, { transactional: true });

  // @ts-expect-error a payload must be an object
  await publish(client, 'x', 'text');
  // @ts-expect-error the name is required
  new Worker({ connectionString: 'postgresql:///app' });
  // @ts-expect-error an unknown option
  new Worker({ name: 'w', concurency: 3 });
  // @ts-expect-error a plain handler's context has no client
  worker.handle('plain', async (_event, { client: c }) => c);
  // @ts-expect-error no such event
  worker.on('finished', () => {});
}
void usage;

// Prometheus: prom-client is passed in.
async function metricsUsage(): Promise<void> {
  const metricsWorker = new Worker({ connectionString: 'postgres://localhost/app', name: 'typed' });
  registerWorkerMetrics(promClient, metricsWorker);
  registerWorkerMetrics(promClient, metricsWorker, { registry: new promClient.Registry() });
  unregisterWorkerMetrics(promClient, metricsWorker);
  // @ts-expect-error: the module, not a registry
  registerWorkerMetrics(new promClient.Registry(), metricsWorker);
}
void metricsUsage;
