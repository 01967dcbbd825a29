import { chmodSync, mkdirSync, mkdtempSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import test from 'ava';
import { checkPinRoot } from './bpf-pins.js';

test('the pin root must be our own directory, writable by no one else', (t) => {
  const base = mkdtempSync(join(tmpdir(), 'zm-pinroot-'));
  try {
    const root = join(base, 'zmesh');
    mkdirSync(root, { mode: 0o755 });
    t.notThrows(() => checkPinRoot(root));
    chmodSync(root, 0o777);
    t.throws(() => checkPinRoot(root), { message: /not group\/world-writable/ });
    const link = join(base, 'link');
    symlinkSync(root, link);
    t.throws(() => checkPinRoot(link), { message: /must be a directory/ }, 'a symlink is not our directory');
  } finally {
    rmSync(base, { recursive: true, force: true });
  }
});
