// index.d.ts is hand-written: compile test/types/usage.ts against it with tsc, so the
// declarations accept the documented usage and reject the marked mistakes.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { test } from 'node:test';
import { promisify } from 'node:util';

const root = fileURLToPath(new URL('..', import.meta.url));
const tsc = `${root}node_modules/typescript/bin/tsc`;

test('index.d.ts type-checks the documented usage', { skip: !existsSync(tsc) && 'typescript is not installed (npm ci)' }, async () => {
  const run = promisify(execFile);
  try {
    await run(process.execPath, [tsc, '-p', 'test/types/tsconfig.json'], { cwd: root });
  } catch (err) {
    assert.fail(`tsc found errors:\n${err.stdout}${err.stderr}`);
  }
});
