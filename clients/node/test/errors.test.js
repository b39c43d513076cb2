// Which errors of a statement ending an attempt are worth sending it again for
// (isTransient), and the stored error text (errorText). No database needed.
import assert from 'node:assert/strict';
import { test } from 'node:test';

import pg from 'pg';

import { errorText, isTransient } from '../lib/errors.js';

function serverError(code) {
  const err = new pg.DatabaseError('from the server', 0, 'error');
  err.severity = 'ERROR';
  err.code = code;
  return err;
}

test('connection problems and passing server states are transient, other server errors are not', () => {
  for (const code of ['08006', '08001', '57P01', '57P02', '57P03', '53300', '53100', '40001', '40P01', '57014', '55P03']) {
    assert.equal(isTransient(serverError(code)), true, code);
  }
  for (const code of ['22021', '22023', '42501', '42883', '23505', 'XX000', '22P02']) {
    assert.equal(isTransient(serverError(code)), false, code);
  }
  assert.equal(isTransient(new Error('Connection terminated unexpectedly')), true);
  assert.equal(isTransient(new Error('timeout exceeded when trying to connect')), true);
  const reset = Object.assign(new Error('read ECONNRESET'), { code: 'ECONNRESET', errno: -104, syscall: 'read' });
  assert.equal(isTransient(reset), true);
  // A five-letter system error code is not a SQLSTATE.
  const pipe = Object.assign(new Error('write EPIPE'), { code: 'EPIPE', errno: -32, syscall: 'write' });
  assert.equal(isTransient(pipe), true);
});

test('errorText writes NUL as \\u0000, which PostgreSQL accepts in text', () => {
  assert.equal(errorText(new TypeError('a\u0000b\u0000')), 'TypeError: a\\u0000b\\u0000');
  assert.equal(errorText('raw \u0000'), 'raw \\u0000');
  assert.ok(!errorText({ bytes: '\u0000' }).includes('\u0000'));
});
