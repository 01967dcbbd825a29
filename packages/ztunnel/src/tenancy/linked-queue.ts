/** A node of a LinkedQueue; `queue` is set while the node is linked. */
export interface QueueNode {
  prev: QueueNode | undefined;
  next: QueueNode | undefined;
  queue: LinkedQueue<QueueNode> | undefined;
}

/**
 * Intrusive doubly linked FIFO: O(1) push, shift and removal from the middle, so that an
 * aborted item leaves its queue at once instead of lingering until it reaches the head
 * (a tenant that enqueues and aborts in a loop could otherwise grow a queue without bound).
 */
export class LinkedQueue<T extends QueueNode> {
  #head: T | undefined;
  #tail: T | undefined;
  #size = 0;

  get size(): number {
    return this.#size;
  }

  peek(): T | undefined {
    return this.#head;
  }

  push(node: T): void {
    node.prev = this.#tail;
    node.next = undefined;
    node.queue = this as LinkedQueue<QueueNode>;
    if (this.#tail) this.#tail.next = node;
    else this.#head = node;
    this.#tail = node;
    this.#size++;
  }

  shift(): T | undefined {
    const node = this.#head;
    if (node) this.remove(node);
    return node;
  }

  /** Unlinks `node` if it is in this queue; returns whether it was. */
  remove(node: T): boolean {
    if (node.queue !== (this as LinkedQueue<QueueNode>)) return false;
    if (node.prev) node.prev.next = node.next;
    else this.#head = node.next as T | undefined;
    if (node.next) node.next.prev = node.prev;
    else this.#tail = node.prev as T | undefined;
    node.prev = node.next = node.queue = undefined;
    this.#size--;
    return true;
  }
}
