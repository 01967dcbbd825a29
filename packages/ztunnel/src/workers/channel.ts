import type { MessagePort, Worker } from 'node:worker_threads';

/** A request/answer over a worker's message port, both ways. Values are structured clones. */
interface Call {
  kind: 'call';
  id: number;
  method: string;
  arg: unknown;
}
interface Answer {
  kind: 'answer';
  id: number;
  value?: unknown;
  error?: { message: string; code?: string };
}

/** Calls that do not answer (the other side died) are rejected, never left pending. */
export class Channel {
  readonly #port: MessagePort | Worker;
  readonly #pending = new Map<number, { resolve: (v: unknown) => void; reject: (e: Error) => void }>();
  readonly #handlers = new Map<string, (arg: unknown) => unknown>();
  #next = 1;
  #closed: Error | undefined;

  constructor(port: MessagePort | Worker) {
    this.#port = port;
    port.on('message', (m: Call | Answer) => this.#receive(m));
  }

  handle<A, R>(method: string, fn: (arg: A) => R | Promise<R>): void {
    this.#handlers.set(method, fn as (arg: unknown) => unknown);
  }

  call<R>(method: string, arg?: unknown, transfer?: readonly ArrayBuffer[]): Promise<R> {
    if (this.#closed) return Promise.reject(this.#closed);
    const id = this.#next++;
    return new Promise<R>((resolve, reject) => {
      this.#pending.set(id, { resolve: resolve as (v: unknown) => void, reject });
      const msg: Call = { kind: 'call', id, method, arg };
      this.#port.postMessage(msg, transfer as ArrayBuffer[] | undefined);
    });
  }

  /** The other side is gone: every call still waiting fails with `why`. */
  close(why: Error): void {
    this.#closed = why;
    for (const p of this.#pending.values()) p.reject(why);
    this.#pending.clear();
  }

  #receive(m: Call | Answer): void {
    if (m.kind === 'answer') {
      const p = this.#pending.get(m.id);
      if (!p) return;
      this.#pending.delete(m.id);
      if (m.error) p.reject(Object.assign(new Error(m.error.message), { code: m.error.code }));
      else p.resolve(m.value);
      return;
    }
    const handler = this.#handlers.get(m.method);
    const answer = (a: Omit<Answer, 'kind' | 'id'>) => {
      if (this.#closed) return;
      this.#port.postMessage({ kind: 'answer', id: m.id, ...a } satisfies Answer);
    };
    if (!handler) {
      answer({ error: { message: `no handler for ${m.method}` } });
      return;
    }
    Promise.resolve()
      .then(() => handler(m.arg))
      .then(
        (value) => answer({ value }),
        (e: unknown) =>
          answer({
            error: {
              message: (e as Error)?.message ?? String(e),
              ...((e as { code?: string })?.code ? { code: (e as { code: string }).code } : {}),
            },
          }),
      );
  }
}
