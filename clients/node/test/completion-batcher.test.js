// The CompletionBatcher on its own (no database): when a complete_many goes out (on size,
// after the delay, at once on flushNow), that tokens arriving during a statement go in the
// next one, and that a failing statement is retried until close() gives it one last try.
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { CompletionBatcher } from '../lib/completion-batcher.js';
import { delay, waitFor } from './helpers/wait.js';

function batcher({ maxBatch = 3, delay: wait = 50, retryDelay = 20, send } = {}) {
  const sent = [];
  const outcomes = [];
  const errors = [];
  const b = new CompletionBatcher({
    send: send ?? (async (tokens) => {
      sent.push([...tokens]);
      return tokens.length;
    }),
    maxBatch,
    delay: wait,
    retryDelay,
    onSent: (tokens, completed, gaveUp) => outcomes.push({ tokens: [...tokens], completed, gaveUp: gaveUp !== undefined }),
    onError: (err) => errors.push(err.message),
  });
  return { b, sent, outcomes, errors };
}

test('a full batch goes out at once, a partial one after the delay', async () => {
  const { b, sent } = batcher({ maxBatch: 3, delay: 80 });
  b.add('a');
  b.add('b');
  b.add('c');
  await delay(5);
  assert.deepEqual(sent, [['a', 'b', 'c']]);
  b.add('d');
  await delay(30);
  assert.deepEqual(sent.length, 1, 'sent before the delay ran out');
  await waitFor(() => sent.length === 2, { timeout: 500 });
  assert.deepEqual(sent[1], ['d']);
  await b.close();
});

test('flushNow sends what is queued without waiting for the delay', async () => {
  const { b, sent } = batcher({ delay: 10000 });
  b.add('a');
  b.flushNow();
  await delay(5);
  assert.deepEqual(sent, [['a']]);
  await b.close();
});

test('tokens that arrive while a statement is out go together in the next one', async () => {
  let release;
  const sent = [];
  const { b } = batcher({
    maxBatch: 100,
    delay: 0,
    send: async (tokens) => {
      sent.push([...tokens]);
      if (sent.length === 1) await new Promise((resolve) => { release = resolve; });
      return tokens.length;
    },
  });
  b.add('first');
  await delay(5);
  for (const t of ['b', 'c', 'd']) b.add(t);
  assert.equal(sent.length, 1, 'one statement at a time');
  release();
  await waitFor(() => sent.length === 2);
  assert.deepEqual(sent[1], ['b', 'c', 'd']);
  await b.close();
});

test('a failing statement is retried; close() makes one last try, then gives up', async () => {
  let calls = 0;
  const { b, outcomes, errors } = batcher({
    delay: 0,
    retryDelay: 20,
    send: async () => {
      calls += 1;
      throw new Error('connection refused');
    },
  });
  b.add('a');
  await waitFor(() => calls >= 3, { what: 'retries' });
  assert.deepEqual(outcomes, [], 'nothing settled while it can still be sent');
  const before = calls;
  await b.close();
  assert.equal(calls, before + 1, 'exactly one last try at close()');
  assert.deepEqual(outcomes, [{ tokens: ['a'], completed: 0, gaveUp: true }]);
  assert.ok(errors.every((m) => m === 'connection refused'));
});

test('close() sends everything still queued', async () => {
  const { b, sent } = batcher({ maxBatch: 2, delay: 10000 });
  for (const t of ['a', 'b', 'c', 'd', 'e']) b.add(t);
  await b.close();
  assert.deepEqual(sent.flat(), ['a', 'b', 'c', 'd', 'e']);
  assert.ok(sent.every((s) => s.length <= 2));
});
