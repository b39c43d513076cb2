// Polling helpers for tests that wait on another process (the worker, the server).
import { setTimeout as delay } from 'node:timers/promises';

// Resolves with fn()'s first truthy result; fails the test after `timeout` ms.
export async function waitFor(fn, { timeout = 10000, every = 20, what = 'the condition' } = {}) {
  const deadline = Date.now() + timeout;
  for (;;) {
    const value = await fn();
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeout} ms waiting for ${what}`);
    await delay(every);
  }
}

export { delay };

// A logger that keeps what it is told, so tests stay quiet and can assert on warnings.
export function recordingLogger() {
  const lines = [];
  const at = (level) => (...args) => lines.push({ level, text: args.join(' ') });
  return { lines, logger: { debug: at('debug'), info: at('info'), warn: at('warn'), error: at('error') } };
}
