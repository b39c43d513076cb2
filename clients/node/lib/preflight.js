// What Worker.start() checks before it claims anything, so that a missing extension, a
// missing GRANT or an unsubscribed handler fails start() with a message saying what to
// run, instead of surfacing later as a claim error repeated every poll interval.
//
// 1. The catalog: is relaybus installed in this database, at 0.2.0 or later (claim's
//    holder argument is 0.2.0's), and may the role execute the functions of the worker
//    right (however it got them: the right, a role holding it, superuser).
// 2. A claim in a transaction that is rolled back: relaybus itself then validates the
//    handler names, the worker name, the holder and the lease, and nothing is kept.

import { explainDatabaseError, missingRight, notInstalled, outdated } from './errors.js';
import { CLAIM, SETUP } from './sql.js';

const RIGHT = 'worker';
const WORKER_FUNCTIONS = [
  'relaybus.claim(text,integer,interval,text[],text)',
  'relaybus.extend_lease(text,interval,text)',
  'relaybus.complete(text)',
  'relaybus.complete_many(text[])',
  'relaybus.fail(text,text,timestamptz)',
  'relaybus.bury(text,text)',
  'relaybus.release(text)',
  'relaybus.relinquish(text,text)',
];

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

// True on relaybus versions whose claim, found something or not, leaves every lane the
// worker holds for the handlers it named leased until at least the claim's start plus its
// lease (0.3.0's claim renews those due): the worker need not extend_lease them meanwhile.
export function claimsRenewHeldLanes(version) {
  return typeof version === 'string' && version.startsWith('0.3.');
}

export async function checkWorkerSetup(pool, { name, lease, handlers, holder }) {
  const client = await pool.connect();
  let broken = false;
  try {
    const { rows: [setup] } = await client.query(SETUP, [WORKER_FUNCTIONS]);
    if (setup.version === null) throw notInstalled(setup.database);
    if (!atLeast(setup.version, '0.2.0')) throw outdated(setup.database, setup.version);
    if (setup.missing.length > 0) throw missingRight(setup.user, RIGHT, setup.version);

    await client.query('BEGIN');
    try {
      await client.query(CLAIM, [name, 1, lease, handlers, holder]);
    } catch (err) {
      throw explainDatabaseError(err, { right: RIGHT, user: setup.user, database: setup.database, version: setup.version });
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
