/** An unbounded async queue: the request side of a writer stream (pushed to, iterated by gRPC). */
export class Channel<T> implements AsyncIterable<T> {
  private readonly items: T[] = [];
  private wake: (() => void) | null = null;
  private ended = false;

  push(item: T): void {
    if (this.ended) return;
    this.items.push(item);
    this.notify();
  }

  /** No more items: the iteration ends once the queued ones are consumed. */
  end(): void {
    this.ended = true;
    this.notify();
  }

  private notify(): void {
    const wake = this.wake;
    this.wake = null;
    wake?.();
  }

  async *[Symbol.asyncIterator](): AsyncGenerator<T> {
    try {
      for (;;) {
        if (this.items.length > 0) {
          yield this.items.shift() as T;
          continue;
        }
        if (this.ended) return;
        await new Promise<void>((resolve) => {
          this.wake = resolve;
        });
      }
    } finally {
      this.ended = true; // the consumer went away (the stream ended or broke)
      this.items.length = 0;
    }
  }
}
