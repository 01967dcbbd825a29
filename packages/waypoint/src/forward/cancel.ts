/**
 * A one-shot cancellation: the downstream going away, or an attempt's deadline. It does
 * what an AbortController would here, without an EventTarget per request: two
 * AbortControllers per request (the request's and its attempt's) were ~6% of the
 * waypoint's CPU at 1,000 requests/s (signal creation and event listeners, in its profile).
 */
export class Cancel {
  #cancelled = false;
  #listeners: Array<() => void> | undefined;

  get cancelled(): boolean {
    return this.#cancelled;
  }

  /**
   * Calls `fn` once on cancel, or at once if that already happened (an attempt started
   * after the client left is stopped too). Returns the call that takes `fn` off again.
   */
  onCancel(fn: () => void): () => void {
    if (this.#cancelled) {
      fn();
      return noop;
    }
    this.#listeners ??= [];
    this.#listeners.push(fn);
    return () => {
      const list = this.#listeners;
      const i = list ? list.indexOf(fn) : -1;
      if (i >= 0) list!.splice(i, 1);
    };
  }

  cancel(): void {
    if (this.#cancelled) return;
    this.#cancelled = true;
    const list = this.#listeners;
    this.#listeners = undefined;
    if (list) for (const fn of list) fn();
  }
}

function noop(): void {}
