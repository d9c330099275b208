// Type-checked (never run) by scripts/test-wasm-js.sh: the package's typings as a user sees them.
import { init, initSync, wasmBackend, MemoryStore, RateLimiter, Limit, InvalidLimitError, type Verdict, type BatchVerdict } from '@ratewindow/wasm';
import { testStore } from '@ratewindow/wasm/testing';

export async function main(bytes: Uint8Array): Promise<number> {
  await init();
  initSync(bytes);
  const store = new MemoryStore();
  const verdict: Verdict = store.consume('k', { uses: 1, windowMs: 1000 });
  const batch: BatchVerdict = store.consumeMany([{ key: 'k', limit: { uses: 1, windowMs: 1000 } }]);
  const ms: number = verdict.retryAfterMs + (verdict.retryTimestamp ?? 0) + (batch.blocked ?? 0);
  const limiter = new RateLimiter(store);
  const ran: boolean | string = await limiter.attempt('k', 1, () => 'ran');
  void Limit.perMinute(5);
  void testStore;
  void wasmBackend().kind;
  void ran;
  try {
    store.consume('k', { uses: NaN, windowMs: 1 });
  } catch (e) {
    if (e instanceof InvalidLimitError) return e.field === 'uses' ? ms : -1;
  }
  return ms;
}
