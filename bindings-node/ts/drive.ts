/**
 * The call driver, the same for every store that talks to a server through the user's client (Redis,
 * PostgreSQL, SQLite): a store starts a call on its planner, and {@link drive} (or {@link driveSync})
 * loops — ask the call for its next step, run the command with the client, feed back the reply, the
 * rows or the client's error — until the call ends. Then the outcome becomes a public value here, and a
 * failure the one typed error of its kind. Every decision is the engine's (`ratewindow_core::call`).
 * @module
 * @internal
 */
import { randomUUID } from 'node:crypto';

import type { Backend } from './backend';
import { checkEntries, checkInteger, checkKey, checkLimitShape } from './check';
import { fromBackend, InternalError, typeError } from './errors';
import type { BackendCall, BackendCalls, BackendRelease, Step } from './redis-backend';
import { cooldownLimit, CooldownStore } from './store';
import { GiveBackError, StoreError, StoreReplyError } from './store-errors';
import type { AttemptResult, Awaitable, HitResult, BatchVerdict, CooldownLimit, Entry, Verdict } from './types';

/** Runs a step's command with the user's client: resolves to the reply (Redis) or the rows (SQL). */
export type RunCommand = (step: Step) => unknown;

/** What the client threw, as the message a call is fed (as the client gives it). */
function message(error: unknown): string {
  if (error instanceof Error) return error.message;
  return typeof error === 'string' ? error : String(error);
}

/** The errors a client threw during one call, by message (a failure's `cause`). */
type Thrown = Map<string, unknown>;

function feedFailure(call: BackendCall, error: unknown, thrown: Thrown): Step {
  const text = message(error);
  thrown.set(text, error);
  return call.fail(text);
}

function isCommand(step: Step): boolean {
  return step.kind === 'script' || step.kind === 'sql';
}

/** Drives `call` to its end, awaiting each command. Throws the outcome's typed error. */
export async function drive(call: BackendCall, run: RunCommand, onGiveBack?: (e: GiveBackError) => void): Promise<Step> {
  const thrown: Thrown = new Map();
  let step = call.next();
  while (isCommand(step)) {
    let answer: unknown;
    try {
      answer = await run(step);
    } catch (e) {
      step = feedFailure(call, e, thrown);
      continue;
    }
    step = step.kind === 'sql' ? call.feedRows(answer) : call.feed(answer);
  }
  return settle(step, thrown, onGiveBack);
}

/** {@link drive} for a synchronous client (SQLite). */
export function driveSync(call: BackendCall, run: RunCommand): Step {
  const thrown: Thrown = new Map();
  let step = call.next();
  while (isCommand(step)) {
    let answer: unknown;
    try {
      answer = run(step);
    } catch (e) {
      step = feedFailure(call, e, thrown);
      continue;
    }
    step = call.feedRows(answer);
  }
  return settle(step, thrown);
}

/** Reports the give-backs that failed, then throws a failed call's error or returns its outcome. */
function settle(step: Step, thrown: Thrown, onGiveBack?: (e: GiveBackError) => void): Step {
  if (step.giveBackFailures !== undefined && onGiveBack !== undefined) {
    for (const f of step.giveBackFailures) {
      try {
        onGiveBack(new GiveBackError(f.keys, f.callId, thrown.get(f.message) ?? new Error(f.message)));
      } catch {
        // A reporter that throws has nowhere else to report to.
      }
    }
  }
  if (step.kind === 'error') throw callError(step, thrown);
  return step;
}

/** A failed call's error: the one place where the engine's error kinds become ratewindow's errors. */
export function callError(step: Step, thrown: Thrown = new Map()): Error {
  const text = step.message ?? 'the call failed';
  switch (step.errorKind) {
    case 'store': {
      const client = step.clientMessage ?? '';
      return new StoreError(text, { cause: thrown.has(client) ? thrown.get(client) : new Error(client) });
    }
    case 'reply':
      return new StoreReplyError(step.source ?? 'unknown', step.expected ?? '', step.got ?? '', text);
    case 'unsupported':
      return new TypeError(text);
    default:
      return new InternalError(`ratewindow: ${text}`);
  }
}

/** A verdict from a `verdict` outcome: single (`consume`, `peek`) or batch, `release` not enumerable. */
export function verdictOf(step: Step, batch: boolean, release?: () => Awaitable<void>): BatchVerdict {
  const v: { -readonly [K in keyof BatchVerdict]: BatchVerdict[K] } = {
    allowed: step.allowed === true,
    retryAfterMs: step.retryAfterMs ?? 0,
  };
  if (step.retryTimestamp !== undefined) v.retryTimestamp = step.retryTimestamp;
  if (batch && step.blocked !== undefined) v.blocked = step.blocked;
  v.limit = step.limit ?? 0;
  v.remaining = step.remaining ?? 0;
  v.refillAfterMs = step.refillAfterMs ?? 0;
  v.resetAfterMs = step.resetAfterMs ?? 0;
  if (release !== undefined) Object.defineProperty(v, 'release', { value: release, enumerable: false });
  return v;
}

/** What the engine threw while starting a call, as a ratewindow error (`entries`: to name the bad limit). */
export function engineError(error: unknown, backend: Backend, entries?: readonly Entry[], decayMs?: number): Error {
  const code = (error as { code?: unknown } | null)?.code;
  if (typeof code === 'string' && code.startsWith('invalid_limit') && entries !== undefined) {
    for (const e of entries) cooldownLimit(e.limit.uses, e.limit.windowMs, backend);
  }
  if (code === 'store_reply') return new StoreReplyError('purge', 'one row (calls, windows)', '', String((error as Error).message));
  if (typeof code === 'string' && code.startsWith('invalid_argument')) return new TypeError((error as Error).message);
  return fromBackend(error, undefined, decayMs);
}

/** A method's answer: at once on a synchronous store (`S` true), else a promise. */
export type Answer<S extends boolean, T> = S extends true ? T : Promise<T>;

/** A batch's entries as the engine takes them: three parallel arrays. */
function columns(entries: readonly Entry[]): [string[], number[], number[]] {
  return [entries.map((e) => e.key), entries.map((e) => e.limit.uses), entries.map((e) => e.limit.windowMs)];
}

/**
 * Every operation of a store whose calls the engine drives (Redis, PostgreSQL, SQLite): the argument
 * checks, starting the call, and the outcome as the public value. A store supplies its planner, how it
 * runs a command with the user's client, and whether that client answers at once (`S`).
 * @internal
 */
export abstract class CallStore<S extends boolean> extends CooldownStore {
  protected abstract readonly calls: BackendCalls;
  protected abstract readonly backend: Backend;
  /** Runs a step's command with the user's client. */
  protected abstract runCommand(step: Step): unknown;
  /** Whether the client answers at once (SQLite's drivers). */
  protected abstract readonly sync: S;

  /** The host clock's reading for a call (only SQLite reads it). */
  protected now(): number {
    return 0;
  }

  /** Where a failed give-back goes (Redis Cluster only). */
  protected giveBackFailed(error: GiveBackError): void {
    process.emitWarning(error);
  }

  /** Starts a call (`begin` checks the arguments too), drives it, converts its outcome. */
  protected go<T>(begin: () => BackendCall, then: (step: Step) => T, entries?: readonly Entry[], decayMs?: number): Answer<S, T> {
    const start = () => {
      try {
        return begin();
      } catch (e) {
        const code = (e as { code?: unknown } | null)?.code;
        throw typeof code === 'string' && !code.startsWith('ERR_') ? engineError(e, this.backend, entries, decayMs) : e;
      }
    };
    if (this.sync) return then(driveSync(start(), (step) => this.runCommand(step))) as Answer<S, T>;
    return (async () => then(await drive(start(), (step) => this.runCommand(step), (e) => this.giveBackFailed(e))))() as Answer<S, T>;
  }

  /** An allowed consume's `release`: the engine's release call with its token, once (again after a failure). */
  private releaser(token: BackendRelease | undefined): (() => Awaitable<void>) | undefined {
    if (token === undefined) return undefined;
    let pending: BackendRelease | undefined = token;
    return () => {
      const t = pending;
      if (t === undefined) return this.sync ? undefined : Promise.resolve();
      pending = undefined;
      const restore = (e: unknown) => {
        pending = t;
        throw e;
      };
      try {
        const done = this.go(() => this.calls.release(t, this.now()), () => undefined) as Awaitable<void>;
        return this.sync ? done : Promise.resolve(done).catch(restore);
      } catch (e) {
        return restore(e);
      }
    };
  }

  /** Counts one call to `key` under `limit`: allowed and recorded, or refused with the wait. */
  override consume(key: string, limit: CooldownLimit): Answer<S, Verdict> {
    return this.go(
      () => {
        checkKey(key);
        checkLimitShape(limit);
        return this.calls.consume(randomUUID(), [key], [limit.uses], [limit.windowMs], false, this.now());
      },
      (step) => verdictOf(step, false),
      [{ key, limit }],
    );
  }

  /** The verdict {@link consume} would give, recording nothing. */
  peek(key: string, limit: CooldownLimit): Answer<S, Verdict> {
    return this.go(
      () => {
        checkKey(key);
        checkLimitShape(limit);
        return this.calls.peek([key], [limit.uses], [limit.windowMs], this.now());
      },
      (step) => verdictOf(step, false),
      [{ key, limit }],
    );
  }

  /**
   * Counts one call against every entry at once, all or nothing; a refusal names `blocked`, the entry
   * with the longest wait. An allowed verdict carries `release()` (not enumerable), which gives back
   * exactly this call.
   */
  override consumeMany(entries: readonly Entry[]): Answer<S, BatchVerdict> {
    return this.go(
      () => {
        checkEntries(entries);
        return this.calls.consume(randomUUID(), ...columns(entries), true, this.now());
      },
      (step) => verdictOf(step, true, this.releaser(step.release)),
      entries,
    );
  }

  /** The verdict {@link consumeMany} would give, recording nothing. */
  override peekMany(entries: readonly Entry[]): Answer<S, BatchVerdict> {
    return this.go(
      () => {
        checkEntries(entries);
        return this.calls.peek(...columns(entries), this.now());
      },
      (step) => verdictOf(step, true),
      entries,
    );
  }

  /**
   * Fixed window: adds `amount` hits to `key` (negative gives back) and returns the count. The first
   * hit opens a window of `decayMs` ms (the store's clock); hits inside it do not move it.
   */
  hit(key: string, decayMs: number, amount = 1): Answer<S, number> {
    return this.go(
      () => {
        checkKey(key);
        if (typeof decayMs !== 'number') throw typeError('decayMs must be a number', decayMs);
        return this.calls.hit(key, decayMs, checkInteger('amount', amount), this.now());
      },
      (step) => step.count ?? 0,
      undefined,
      decayMs,
    );
  }

  /** {@link hit}, answering the count and the milliseconds until the window ends. */
  hitWindow(key: string, decayMs: number, amount = 1): Answer<S, HitResult> {
    return this.go(
      () => {
        checkKey(key);
        if (typeof decayMs !== 'number') throw typeError('decayMs must be a number', decayMs);
        return this.calls.hit(key, decayMs, checkInteger('amount', amount), this.now());
      },
      (step): HitResult => ({ count: step.count ?? 0, resetAfterMs: step.resetAfterMs ?? 0 }),
      undefined,
      decayMs,
    );
  }

  /**
   * Fixed window, atomically: counts one hit on `key` if it has fewer than `max` in its window (opening
   * one of `decayMs` ms if none runs), else nothing. Exactly `max` attempts are allowed per window,
   * however many run at once.
   */
  attempt(key: string, max: number, decayMs: number): Answer<S, AttemptResult> {
    return this.go(
      () => {
        checkKey(key);
        if (typeof decayMs !== 'number') throw typeError('decayMs must be a number', decayMs);
        return this.calls.attempt(key, checkInteger('max', max), decayMs, this.now());
      },
      (step): AttemptResult => ({ allowed: step.allowed === true, count: step.count ?? 0, resetAfterMs: step.resetAfterMs ?? 0 }),
      undefined,
      decayMs,
    );
  }

  private read<T>(key: string, query: 'attempts' | 'tooManyAttempts' | 'remaining' | 'availableIn' | 'availableInMs', max: number, value: (step: Step) => T): Answer<S, T> {
    return this.go(() => {
      checkKey(key);
      return this.calls.read(key, query, checkInteger('max', max), this.now());
    }, value);
  }

  /** Hits counted in `key`'s current window; 0 when it has none. */
  attempts(key: string): Answer<S, number> {
    return this.read(key, 'attempts', 0, (s) => s.int ?? 0);
  }

  /** Whether `key` has `max` or more hits in a window that still runs. */
  tooManyAttempts(key: string, max: number): Answer<S, boolean> {
    return this.read(key, 'tooManyAttempts', max, (s) => s.bool === true);
  }

  /** `max` minus the hits in `key`'s current window, floored at 0. */
  remaining(key: string, max: number): Answer<S, number> {
    return this.read(key, 'remaining', max, (s) => s.int ?? 0);
  }

  /** Whole seconds until `key`'s window ends, rounded up; 0 when it has none. */
  availableIn(key: string): Answer<S, number> {
    return this.read(key, 'availableIn', 0, (s) => s.int ?? 0);
  }

  /** Milliseconds until `key`'s window ends; 0 when it has none. */
  availableInMs(key: string): Answer<S, number> {
    return this.read(key, 'availableInMs', 0, (s) => s.int ?? 0);
  }

  /** Sets `key`'s count to zero, keeping its window running. */
  resetAttempts(key: string): Answer<S, void> {
    return this.go(() => (checkKey(key), this.calls.resetAttempts(key, this.now())), () => undefined);
  }

  /** Removes `key`'s count and window; its next hit opens a new window. */
  clear(key: string): Answer<S, void> {
    return this.go(() => (checkKey(key), this.calls.clear(key, this.now())), () => undefined);
  }
}
