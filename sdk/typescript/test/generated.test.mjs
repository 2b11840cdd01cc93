// The committed generated code is what `npm run generate` makes from proto/:
// regenerate into a temporary directory and compare, byte for byte.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { sdkDir, repoRoot } from './helpers.mjs';

function files(dir, base = dir) {
  return fs.readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
    e.isDirectory() ? files(path.join(dir, e.name), base) : [path.relative(base, path.join(dir, e.name))]).sort();
}

test('the generated code is current', () => {
  const out = fs.mkdtempSync(path.join(os.tmpdir(), 'trellis-ts-gen-'));
  execFileSync('go', ['tool', '-modfile=tools/go.mod', 'buf', 'generate', '--template', 'sdk/typescript/buf.gen.yaml', '--output', out], { cwd: repoRoot, stdio: 'inherit' });
  const fresh = path.join(out, 'sdk/typescript/gen');
  const committed = path.join(sdkDir, 'gen');
  assert.deepEqual(files(committed), files(fresh), 'the same files');
  for (const f of files(fresh)) {
    assert.ok(fs.readFileSync(path.join(committed, f)).equals(fs.readFileSync(path.join(fresh, f))),
      `gen/${f} is not what proto/ generates: run npm run generate`);
  }
});
