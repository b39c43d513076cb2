// Argument checks shared by the publisher and the worker. They throw TypeError or
// RangeError before any statement is sent, with the argument's name in the message, so a
// mistake is reported where it was made rather than as a server error deep in a loop.

const MAX_NAME_BYTES = 1000; // relaybus's limit for every name (docs/sql-api.md)

function describe(value) {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'an array';
  return typeof value;
}

export function checkName(value, what) {
  if (typeof value !== 'string') throw new TypeError(`${what} must be a string (got ${describe(value)})`);
  if (value.length === 0) throw new RangeError(`${what} must not be empty`);
  if (Buffer.byteLength(value, 'utf8') > MAX_NAME_BYTES) {
    throw new RangeError(`${what} must be at most ${MAX_NAME_BYTES} bytes long`);
  }
  return value;
}

// A name or nothing: undefined and null both mean "not given".
export function checkOptionalName(value, what) {
  return value === undefined || value === null ? null : checkName(value, what);
}

export function checkInteger(value, what, min, max) {
  if (typeof value !== 'number' || !Number.isInteger(value)) {
    throw new TypeError(`${what} must be an integer (got ${describe(value)} ${String(value)})`);
  }
  if (value < min || value > max) throw new RangeError(`${what} must be between ${min} and ${max} (got ${value})`);
  return value;
}

// A duration in milliseconds. `min` is inclusive unless `above` is set.
export function checkMillis(value, what, { min = 0, max = Number.MAX_SAFE_INTEGER, above = false } = {}) {
  if (typeof value !== 'number' || !Number.isFinite(value)) {
    throw new TypeError(`${what} must be a number of milliseconds (got ${describe(value)} ${String(value)})`);
  }
  if (above ? value <= min : value < min) {
    throw new RangeError(`${what} must be ${above ? 'more than' : 'at least'} ${min} ms (got ${value})`);
  }
  if (value > max) throw new RangeError(`${what} must be at most ${max} ms (got ${value})`);
  return value;
}

export function checkFunction(value, what) {
  if (typeof value !== 'function') throw new TypeError(`${what} must be a function (got ${describe(value)})`);
  return value;
}

export function checkBoolean(value, what) {
  if (typeof value !== 'boolean') throw new TypeError(`${what} must be true or false (got ${describe(value)})`);
  return value;
}

export function isPlainObject(value) {
  if (value === null || typeof value !== 'object' || Array.isArray(value)) return false;
  const proto = Object.getPrototypeOf(value);
  return proto === Object.prototype || proto === null;
}

// A JSON object value (payload, headers): a plain object, as relaybus refuses anything else.
export function checkJsonObject(value, what) {
  if (!isPlainObject(value)) throw new TypeError(`${what} must be a plain object (got ${describe(value)})`);
  return value;
}

// Refuses option names the caller did not mean (a typo like `eventId` for `id` would
// otherwise be ignored silently).
export function checkKnownOptions(options, allowed, what) {
  if (options === undefined) return {};
  if (!isPlainObject(options)) throw new TypeError(`${what} must be an object (got ${describe(options)})`);
  for (const name of Object.keys(options)) {
    if (!allowed.includes(name)) {
      throw new TypeError(`${what}: unknown option "${name}" (known: ${allowed.join(', ')})`);
    }
  }
  return options;
}

// A point in time for timestamptz parameters: a valid Date, or a string PostgreSQL parses.
export function checkTime(value, what) {
  if (value instanceof Date) {
    if (Number.isNaN(value.getTime())) throw new RangeError(`${what} is an invalid Date`);
    return value.toISOString();
  }
  if (typeof value === 'string' && value.length > 0) return value;
  throw new TypeError(`${what} must be a Date or a timestamp string (got ${describe(value)})`);
}

// The interval text relaybus's interval parameters take.
export function interval(ms) {
  return `${ms} milliseconds`;
}
