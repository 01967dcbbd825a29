/**
 * Reads untyped input (parsed YAML, decoded xDS) field by field, collecting every problem
 * with its path instead of throwing on the first, so a refused config names all that is wrong.
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

  optionalObject(value: unknown, path: string): Record<string, unknown> | undefined {
    return value === undefined ? undefined : this.object(value, path);
  }

  array(value: unknown, path: string): unknown[] {
    if (value === undefined || value === null) return [];
    if (Array.isArray(value)) return value;
    this.fail(path, 'must be a list');
    return [];
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

  strings(value: unknown, path: string): string[] | undefined {
    if (value === undefined) return undefined;
    return this.array(value, path).flatMap((v, i) => this.string(v, `${path}[${i}]`) ?? []);
  }

  int(value: unknown, path: string, min: number, max: number, fallback?: number): number | undefined {
    if (value === undefined && fallback !== undefined) return fallback;
    if (Number.isInteger(value) && (value as number) >= min && (value as number) <= max)
      return value as number;
    return this.fail(path, `must be an integer ${min}..${max}`);
  }

  port(value: unknown, path: string): number | undefined {
    return this.int(value, path, 1, 65535);
  }

  bool(value: unknown, path: string, fallback: boolean): boolean {
    if (value === undefined) return fallback;
    if (typeof value === 'boolean') return value;
    this.fail(path, 'must be true or false');
    return fallback;
  }

  /** Milliseconds from a number (ms) or a Gateway API / protobuf duration ("1.5s", "250ms", "2m"). */
  duration(value: unknown, path: string, fallback?: number): number | undefined {
    if (value === undefined) return fallback;
    if (typeof value === 'number' && Number.isFinite(value) && value >= 0) return value;
    const m = typeof value === 'string' ? /^(\d+(?:\.\d+)?)(ms|s|m|h)$/.exec(value) : null;
    if (!m) return this.fail(path, 'must be a duration like 250ms, 1.5s, 2m');
    const scale = { ms: 1, s: 1000, m: 60_000, h: 3_600_000 }[m[2] as 'ms' | 's' | 'm' | 'h'];
    return Math.round(Number(m[1]) * scale);
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
