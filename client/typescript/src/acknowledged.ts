/**
 * Per lease token, the highest `nextSeq` the service acknowledged to a client's unary appends
 * under it: each append sends it (`acknowledgedNextSeq`), so a database restored from a backup
 * taken before some of them, which still holds the lease, refuses the writer with
 * ACKNOWLEDGED_PAST_LOG instead of giving those seqs to other events. It only grows, so it
 * holds for appends sent while others are in flight, where `expectedNextSeq` cannot.
 *
 * A token forgotten (released, or pushed out past `ACKNOWLEDGED_TOKENS`) sends nothing: its
 * appends are checked as an older client's are, not at all. The Python clients' `Acknowledged`.
 */

/** Lease tokens remembered at most (the least recently used go first). */
export const ACKNOWLEDGED_TOKENS = 4096;

export class Acknowledged {
  private readonly nextSeqs = new Map<string, bigint>();

  /** Where the acknowledgements under `token` end; undefined if none was seen (or remembered). */
  get(token: string): bigint | undefined {
    return this.nextSeqs.get(token);
  }

  /** An append under `token` was acknowledged, the log's next seq after it `nextSeq`. */
  saw(token: string, nextSeq: bigint): void {
    if (!token) return;
    const before = this.nextSeqs.get(token);
    this.nextSeqs.delete(token); // re-inserted last: the most recently used
    this.nextSeqs.set(token, before !== undefined && before > nextSeq ? before : nextSeq);
    while (this.nextSeqs.size > ACKNOWLEDGED_TOKENS) {
      const oldest = this.nextSeqs.keys().next().value;
      if (oldest === undefined) break;
      this.nextSeqs.delete(oldest);
    }
  }

  /** The lease under `token` was given back: nothing more is appended under it. */
  forget(token: string): void {
    this.nextSeqs.delete(token);
  }
}
