// The errors this package raises, and the translation of the database errors that mean
// "relaybus is not set up for this role in this database" into messages that say what to
// run. Everything else the server raises is passed through unchanged, so callers keep
// checking err.code (SQLSTATE) as they do with any pg error.

// A setup or usage problem found by this package. `code` is one of the RELAYBUS_* names
// below; `sqlState` is the server's SQLSTATE when a database error was translated.
export class RelaybusError extends Error {
  constructor(message, { code, cause, sqlState } = {}) {
    super(message, cause === undefined ? undefined : { cause });
    this.name = 'RelaybusError';
    this.code = code;
    if (sqlState !== undefined) this.sqlState = sqlState;
  }
}

// Thrown by a handler to dead-letter the delivery now (relaybus.bury) instead of retrying:
// for errors that no retry can fix, such as a malformed payload.
export class BuryError extends Error {
  constructor(message, options) {
    super(message, options);
    this.name = 'BuryError';
  }
}

export const NOT_INSTALLED = 'RELAYBUS_NOT_INSTALLED';
export const OUTDATED = 'RELAYBUS_OUTDATED';
export const PERMISSION = 'RELAYBUS_PERMISSION';
export const NOT_SUBSCRIBED = 'RELAYBUS_NOT_SUBSCRIBED';

export function notInstalled(database, cause) {
  return new RelaybusError(
    `relaybus is not installed in database "${database}": a superuser must run ` +
      `CREATE EXTENSION relaybus in that database (version 0.2.0 or later)`,
    { code: NOT_INSTALLED, cause, sqlState: cause?.code },
  );
}

export function outdated(database, version, cause) {
  return new RelaybusError(
    `relaybus ${version ?? '(unknown version)'} is installed in database "${database}", ` +
      `but this client needs 0.2.0 or later: a superuser must run ALTER EXTENSION relaybus UPDATE`,
    { code: OUTDATED, cause, sqlState: cause?.code },
  );
}

// From 0.2.1 rights are given per database, by name (relaybus.grant_rights); 0.2.0 granted
// them to the cluster-wide roles relaybus_publisher, relaybus_worker and relaybus_admin.
const RIGHTS_BY_NAME = [0, 2, 1];

function versionAtLeast(version, wanted) {
  const parts = String(version).split('.').map(Number);
  for (let i = 0; i < wanted.length; i++) {
    const x = parts[i] ?? 0;
    if (Number.isNaN(x)) return true; // an unfamiliar version scheme: assume a newer one
    if (x !== wanted[i]) return x > wanted[i];
  }
  return true;
}

// `name` as a double-quoted SQL identifier.
export function quoteIdent(name) {
  return `"${name.replaceAll('"', '""')}"`;
}

// `text` as a SQL string literal, by PostgreSQL's quote_literal rules.
export function quoteLiteral(text) {
  const quoted = `'${text.replaceAll("'", "''").replaceAll('\\', '\\\\')}'`;
  return text.includes('\\') ? `E${quoted}` : quoted;
}

// The literal naming role `name` where a regrole is read (grant_rights's first argument):
// an identifier, double-quoted inside the literal unless it is all lower case letters,
// digits and underscores.
export function roleLiteral(name) {
  return quoteLiteral(/^[a-z_][a-z0-9_$]*$/.test(name) ? name : quoteIdent(name));
}

// What an admin runs so that `user` (null: unknown) gets `right` (publisher, worker or
// admin) in the database, on relaybus `version` (null: unknown, and both ways are named).
export function grantStatement(right, user, version) {
  const byName = `SELECT relaybus.grant_rights(${user ? roleLiteral(user) : "'<your role>'"}, ${quoteLiteral(right)})`;
  const old = `GRANT relaybus_${right} TO ${user ? quoteIdent(user) : '<your role>'}`;
  if (version === null || version === undefined) return `${byName} (on relaybus 0.2.0: ${old})`;
  return versionAtLeast(version, RIGHTS_BY_NAME) ? byName : old;
}

// The role lacks the privileges of a relaybus right. `right` is publisher, worker or admin;
// `version` the installed relaybus (null when unknown).
export function missingRight(user, right, version, cause) {
  const who = user ? `"${user}"` : 'the connected role';
  const what = version && !versionAtLeast(version, RIGHTS_BY_NAME) ? `relaybus_${right}` : `the ${right} right in this database`;
  return new RelaybusError(
    `role ${who} lacks the privileges of ${what}: an admin must run ${grantStatement(right, user, version)}`,
    { code: PERMISSION, cause, sqlState: cause?.code },
  );
}

export function notSubscribed(handler, database, cause) {
  return new RelaybusError(
    `handler "${handler}" is not subscribed in database "${database}": an admin must run ` +
      `SELECT relaybus.subscribe('${handler.replaceAll("'", "''")}', ARRAY['<event type>']) first`,
    { code: NOT_SUBSCRIBED, cause, sqlState: cause?.code },
  );
}

// Turns a database error into a RelaybusError when it is one of the setup problems, and
// returns it unchanged otherwise. `right` is the relaybus right the call needs (publisher,
// worker, admin); `user`, `database` and `version` (relaybus's, null when unknown) name the
// connection, for the message.
export function explainDatabaseError(err, { right, user, database, version = null }) {
  const message = typeof err?.message === 'string' ? err.message : '';
  switch (err?.code) {
    case '3F000': // invalid_schema_name: schema "relaybus" does not exist
      if (message.includes('"relaybus"')) return notInstalled(database ?? '?', err);
      break;
    case '42883': // undefined_function: an older relaybus, without this function or argument
      if (message.includes('relaybus.')) return outdated(database ?? '?', null, err);
      break;
    case '42501': // insufficient_privilege
      if (/permission denied for (schema relaybus|function)/.test(message)) {
        return missingRight(user, right, version, err);
      }
      break;
    case '42704': {
      const m = /handler "(.*)" is not subscribed/.exec(message);
      if (m) return notSubscribed(m[1], database ?? '?', err);
      break;
    }
    default:
      break;
  }
  return err;
}

// The text stored as last_error for a handler's error: the message, with the error's name
// when it is more specific than Error, and the SQLSTATE of a database error (the format
// relaybus's in-database handlers use). Bounded, so a huge message cannot bloat the row.
// PostgreSQL refuses NUL in text (SQLSTATE 22021), so each is written as the six
// characters \u0000: a message with binary in it is still stored, and says where.
const MAX_ERROR_TEXT = 8000;

export function errorText(err) {
  let text;
  if (err instanceof Error) {
    const message = err.message || '(no message)';
    if (typeof err.code === 'string' && /^[0-9A-Z]{5}$/.test(err.code)) {
      text = `${message} (SQLSTATE ${err.code})`; // pg's errors are all named "error"
    } else {
      const specific = err.name && err.name !== 'Error' && err.name !== 'BuryError';
      text = specific ? `${err.name}: ${message}` : message;
    }
  } else if (typeof err === 'string') {
    text = err;
  } else {
    try {
      text = `non-Error thrown: ${JSON.stringify(err) ?? String(err)}`;
    } catch {
      text = `non-Error thrown: ${String(err)}`;
    }
  }
  text = text.replaceAll('\u0000', '\\u0000');
  return text.length > MAX_ERROR_TEXT ? `${text.slice(0, MAX_ERROR_TEXT)}...` : text;
}

// Whether a statement that failed with `err` may work when sent again: the connection broke
// or could not be made (no SQLSTATE: a socket error, pg's "Connection terminated", a
// connect timeout; class 08), the server is shutting down or restarting (57P01-57P03),
// out of resources (class 53), the statement was cancelled or timed out (57014, 55P03), or
// lost a serialization or deadlock race (40001, 40P01). Any other server error (a value
// PostgreSQL refuses, a missing privilege) fails the same way every time.
const TRANSIENT_SQLSTATES = new Set(['57P01', '57P02', '57P03', '57P05', '57014', '55P03', '40001', '40P01']);

export function isTransient(err) {
  const code = err?.code;
  const isServerError = typeof code === 'string' && /^[0-9A-Z]{5}$/.test(code) && typeof err.severity === 'string';
  if (!isServerError) return true;
  return code.startsWith('08') || code.startsWith('53') || TRANSIENT_SQLSTATES.has(code);
}
