// The worker's logger: anything console-like (debug, info, warn, error). By default debug
// and info go to util.debuglog('relaybus'), shown only with NODE_DEBUG=relaybus, and warn
// and error to stderr: those are rare and need someone's attention (a claim that keeps
// failing, leases lost). A logger that lacks a method gets the default for it.
import util from 'node:util';

const debuglog = util.debuglog('relaybus');

export const defaultLogger = Object.freeze({
  debug: (...args) => debuglog(...args),
  info: (...args) => debuglog(...args),
  warn: (...args) => console.warn('relaybus:', ...args),
  error: (...args) => console.error('relaybus:', ...args),
});

const LEVELS = ['debug', 'info', 'warn', 'error'];

export function makeLogger(logger) {
  if (logger === undefined || logger === null) return defaultLogger;
  if (typeof logger !== 'object' && typeof logger !== 'function') {
    throw new TypeError('logger must be an object with debug/info/warn/error methods, like console');
  }
  const out = {};
  for (const level of LEVELS) {
    out[level] = typeof logger[level] === 'function' ? logger[level].bind(logger) : defaultLogger[level];
  }
  return out;
}
