// What Worker.start() checks before it claims anything, so that a missing extension, a
// missing GRANT or an unsubscribed handler fails start() with a message saying what to
// run, instead of surfacing later as a claim error repeated every poll interval.
//
// 1. The catalog: is relaybus installed in this database, at 0.2.0 or later (claim's
//    holder argument is 0.2.0's), and is the role a member of relaybus_worker.
// 2. A claim in a transaction that is rolled back: relaybus itself then validates the
//    handler names, the worker name, the holder and the lease, and nothing is kept.

import { explainDatabaseError, missingRole, notInstalled, outdated } from './errors.js';
import { CLAIM, SETUP } from './sql.js';

const ROLE = 'relaybus_worker';

function atLeast(version, wanted) {
  const a = version.split('.').map(Number);
  const b = wanted.split('.').map(Number);
  for (let i = 0; i < Math.max(a.length, b.length); i++) {
    const x = a[i] ?? 0;
    const y = b[i] ?? 0;
    if (Number.isNaN(x)) return true; // an unfamiliar version scheme: let the claim decide
    if (x !== y) return x > y;
  }
  return true;
}

export async function checkWorkerSetup(pool, { name, lease, handlers, holder }) {
  const client = await pool.connect();
  let broken = false;
  try {
    const { rows: [setup] } = await client.query(SETUP, [ROLE]);
    if (setup.version === null) throw notInstalled(setup.database);
    if (!atLeast(setup.version, '0.2.0')) throw outdated(setup.database, setup.version);
    if (setup.member !== true) throw missingRole(setup.user, ROLE);

    await client.query('BEGIN');
    try {
      await client.query(CLAIM, [name, 1, lease, handlers, holder]);
    } catch (err) {
      throw explainDatabaseError(err, { role: ROLE, user: setup.user, database: setup.database });
    } finally {
      await client.query('ROLLBACK').catch(() => {
        broken = true;
      });
    }
    return setup;
  } catch (err) {
    // A connection error leaves the client unusable: do not hand it back to the pool.
    if (!err?.code || !/^(RELAYBUS_|[0-9A-Z]{5}$)/.test(err.code)) broken = true;
    throw err;
  } finally {
    client.release(broken);
  }
}
