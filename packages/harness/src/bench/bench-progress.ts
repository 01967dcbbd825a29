/**
 * One line per bench step, with the step number, elapsed time and the numbers it produced:
 * readable in a terminal and in CI logs alike (no cursor tricks).
 */
export class BenchProgress {
  #done = 0;
  readonly #started = Date.now();

  constructor(private readonly total: number) {}

  async step<T>(label: string, run: () => Promise<T>, describe: (value: T) => string): Promise<T> {
    const n = String(++this.#done).padStart(String(this.total).length);
    process.stdout.write(`[${n}/${this.total}] ${this.#elapsed()} ${label} … `);
    try {
      const value = await run();
      console.log(describe(value) || 'ok');
      return value;
    } catch (e) {
      console.log(`failed: ${(e as Error).message}`);
      throw e;
    }
  }

  #elapsed(): string {
    const s = Math.round((Date.now() - this.#started) / 1000);
    return `${Math.floor(s / 60)}:${String(s % 60).padStart(2, '0')}`;
  }
}
