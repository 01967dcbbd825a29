import { X509Certificate } from 'node:crypto';
import { type FSWatcher, watch } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { basename, dirname } from 'node:path';
import { logger } from '../log/logger.js';
import { err, ok, type Result } from '../result.js';
import type { TrustBundle } from './trust-bundle.js';

const log = logger('roots-file');

/** A bundle of a few roots is a few KB; anything far larger is not a roots file. */
export const MAX_ROOTS_FILE_BYTES = 1024 * 1024;
const ROOTS_DEBOUNCE_MS = 50;

/** Every CA certificate in a PEM file, or the reasons the file is not a usable roots file. */
export function parseRootsPem(text: string): Result<string[]> {
  const blocks = text.match(/-----BEGIN CERTIFICATE-----[\s\S]+?-----END CERTIFICATE-----/g) ?? [];
  const reasons: string[] = [];
  const roots: string[] = [];
  blocks.forEach((pem, i) => {
    try {
      const cert = new X509Certificate(pem);
      if (cert.ca) roots.push(cert.toString());
      else reasons.push(`certificate ${i}: not a CA`);
    } catch (e) {
      reasons.push(`certificate ${i}: ${(e as Error).message}`);
    }
  });
  if (roots.length === 0 && reasons.length === 0) reasons.push('no certificate in the file');
  return reasons.length > 0 ? err(reasons) : ok(roots);
}

/**
 * Keeps a TrustBundle in step with a roots file (docs/design.md §5: several roots trusted at once,
 * new ones arrive through the watched file). Roots added to the file are trusted; roots
 * removed from it are dropped, but only ones this file brought in. A file that does not
 * parse, or lists no root, changes nothing: a half-written file never empties the bundle.
 */
export class RootsFileWatcher {
  readonly #path: string;
  readonly #bundle: TrustBundle;
  /** Fingerprints of roots that came from the file, so removal leaves other sources alone. */
  readonly #fromFile = new Map<string, string>();
  #watcher: FSWatcher | undefined;
  #timer: NodeJS.Timeout | undefined;
  #loading: Promise<void> = Promise.resolve();

  constructor(path: string, bundle: TrustBundle) {
    this.#path = path;
    this.#bundle = bundle;
  }

  /** Loads the file once (its errors are returned) and then watches it. */
  async start(): Promise<Result<number>> {
    const first = await this.load();
    // Watch the directory: writers replace the file by rename, which ends a file watch.
    this.#watcher = watch(dirname(this.#path), (_event, name) => {
      if (name !== null && name !== basename(this.#path)) return;
      clearTimeout(this.#timer);
      this.#timer = setTimeout(() => {
        this.#loading = this.#loading.then(() => this.load().then(() => undefined));
      }, ROOTS_DEBOUNCE_MS);
    });
    return first;
  }

  stop(): void {
    clearTimeout(this.#timer);
    this.#watcher?.close();
  }

  /** Reads the file and applies the difference; returns the number of roots it lists. */
  async load(): Promise<Result<number>> {
    let text: string;
    try {
      text = await readFile(this.#path, 'utf8');
    } catch (e) {
      log.warn({ path: this.#path, err: (e as Error).message }, 'roots file unreadable; bundle unchanged');
      return err([`${this.#path}: ${(e as Error).message}`]);
    }
    if (text.length > MAX_ROOTS_FILE_BYTES)
      return err([`${this.#path}: larger than ${MAX_ROOTS_FILE_BYTES}`]);
    const parsed = parseRootsPem(text);
    if (!parsed.ok) {
      log.warn({ path: this.#path, reasons: parsed.error }, 'roots file refused; bundle unchanged');
      return parsed;
    }
    this.#apply(parsed.value);
    return ok(parsed.value.length);
  }

  #apply(roots: string[]): void {
    const wanted = new Map(roots.map((pem) => [new X509Certificate(pem).fingerprint256, pem]));
    for (const [fp, pem] of wanted) {
      if (this.#fromFile.has(fp)) continue;
      this.#bundle.add(pem);
      this.#fromFile.set(fp, pem);
      log.info({ path: this.#path, fingerprint: fp }, 'trust root added');
    }
    for (const [fp, pem] of [...this.#fromFile]) {
      if (wanted.has(fp)) continue;
      this.#bundle.remove(pem);
      this.#fromFile.delete(fp);
      log.info({ path: this.#path, fingerprint: fp }, 'trust root removed');
    }
  }
}
