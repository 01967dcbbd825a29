/**
 * Reads untyped input (parsed YAML) field by field, collecting every problem with its
 * path instead of throwing on the first: a refused config names all that is wrong.
 */
export class FieldReader {
  readonly reasons: string[] = [];

  constructor(private readonly source: string) {}

  fail(path: string, reason: string): undefined {
    this.reasons.push(`${this.source}: ${path}: ${reason}`);
    return undefined;
  }

  object(value: unknown, path: string): Record<string, unknown> | undefined {
    if (value !== null && typeof value === 'object' && !Array.isArray(value))
      return value as Record<string, unknown>;
    return this.fail(path, 'must be a mapping');
  }

  array(value: unknown, path: string, optional = true): unknown[] | undefined {
    if (value === undefined && optional) return [];
    if (Array.isArray(value)) return value;
    return this.fail(path, 'must be a list');
  }

  string(
    value: unknown,
    path: string,
    opts: { optional?: boolean; pattern?: RegExp } = {},
  ): string | undefined {
    if (value === undefined && opts.optional) return undefined;
    if (typeof value !== 'string' || value === '') return this.fail(path, 'must be a non-empty string');
    if (opts.pattern && !opts.pattern.test(value)) return this.fail(path, `must match ${opts.pattern}`);
    return value;
  }

  port(value: unknown, path: string): number | undefined {
    if (Number.isInteger(value) && (value as number) >= 1 && (value as number) <= 65535)
      return value as number;
    return this.fail(path, 'must be a port number 1..65535');
  }

  oneOf<T extends string>(value: unknown, path: string, allowed: readonly T[], fallback: T): T {
    if (value === undefined) return fallback;
    if (allowed.includes(value as T)) return value as T;
    this.fail(path, `must be one of ${allowed.join(', ')}`);
    return fallback;
  }

  /** Rejects keys this reader does not know, so a typo is an error rather than a silent default. */
  onlyKeys(obj: Record<string, unknown>, path: string, known: readonly string[]): void {
    for (const key of Object.keys(obj))
      if (!known.includes(key)) this.fail(`${path}.${key}`, 'unknown field');
  }
}
