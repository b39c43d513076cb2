// A throwaway database per test file, on the cluster the PG* environment variables name
// (PGHOST a socket directory or host, PGPORT, PGUSER a superuser): created with relaybus
// installed, dropped at the end. Names start with relaybus_node_ so that a leftover is
// recognisable, and carry the pid so that files running in parallel never share one.
import pg from 'pg';

for (const name of ['PGHOST', 'PGPORT', 'PGUSER']) {
  if (!process.env[name]) {
    throw new Error(`the tests need ${name} (and PGHOST/PGPORT/PGUSER for a superuser of a running cluster with relaybus)`);
  }
}

export function connectionString(database, user = process.env.PGUSER) {
  const password = process.env.PGPASSWORD ? `:${encodeURIComponent(process.env.PGPASSWORD)}` : '';
  return `postgresql://${encodeURIComponent(user)}${password}@${encodeURIComponent(process.env.PGHOST)}:` +
    `${process.env.PGPORT}/${encodeURIComponent(database)}`;
}

async function onServer(statement) {
  const client = new pg.Client({ database: 'postgres' });
  await client.connect();
  try {
    await client.query(statement);
  } finally {
    await client.end();
  }
}

// { name, url, admin (a connected superuser client), drop() }. `extension: false` leaves
// relaybus uninstalled.
export async function createDatabase(tag, { extension = true } = {}) {
  const name = `relaybus_node_${tag}_${process.pid}`;
  await onServer(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
  await onServer(`CREATE DATABASE ${name}`);
  const admin = new pg.Client({ database: name });
  await admin.connect();
  if (extension) await admin.query('CREATE EXTENSION relaybus');
  return {
    name,
    url: connectionString(name),
    admin,
    async drop() {
      await admin.end().catch(() => {});
      await onServer(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
    },
  };
}

// A login role for privilege tests; cluster-wide, so named per process and dropped after
// (after the databases it holds rights in: rights are privileges in a database).
// `name` replaces the generated name, for names that need quoting.
export async function createRole(tag, { name = `relaybus_node_${tag}_${process.pid}` } = {}) {
  const quoted = `"${name.replaceAll('"', '""')}"`;
  await onServer(`DROP ROLE IF EXISTS ${quoted}`);
  await onServer(`CREATE ROLE ${quoted} LOGIN`);
  return { name, quoted, drop: () => onServer(`DROP ROLE IF EXISTS ${quoted}`) };
}
