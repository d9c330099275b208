/**
 * The call driver, the same for every store that talks to a server through the user's client (Redis,
 * PostgreSQL, SQLite): a store starts a call on its planner, and {@link drive} (or {@link driveSync})
 * loops — run the step the call answered with the client, feed back the reply, the rows or the
 * client's error — until the call ends. Then the outcome, left in the store's call record by the last
 * feed, becomes a public value here, and a failure the one typed error of its kind. Every decision is
 * the engine's (`ratewindow_core::call`). The record is shared by the store's calls: each step is read
 * from it right after the native call that wrote it, before anything is awaited.
 * @module
 * @internal
 */
import type { Backend } from './backend';
import { checkEntries, checkInteger, checkKey, checkLimitShape, costOf, rateKind } from './check';
import { fromBackend, InternalError, typeError, UnsupportedError } from './errors';
import { CALL_RECORD_NUMBERS, CallSlot, StepKind, type BackendCalls, type BackendRelease, type CallErrorInfo, type WindowQuery } from './redis-backend';
import { Lock, withLock, type LockBackend, type LockDriver, type PreparedLock, type WithLockOptions } from './lock';
import { cooldownLimit, CooldownStore } from './store';
import { CallPlan, PLAN_KEYS } from './redis-plan';
import { GiveBackError, StoreError, StoreReplyError } from './store-errors';
import type { AnyLimit, AttemptResult, Awaitable, BatchVerdict, CallOptions, CooldownLimit, CounterLimit, Entry, GcraLimit, HitResult, Verdict } from './types';

/**
 * Runs call `id`'s command (a `Script` or `Sql` step) with the user's client: its reply or rows.
 * `command`: a `Script` step's pieces joined (see `BackendCalls`). Called right after the native call
 * that answered the step, so the record still holds it.
 */
export type RunCommand = (kind: StepKind, id: number, command: string | null) => unknown;

/** Makes the `release` of a held call's token (the store's release of it). */
export type Releaser = (token: BackendRelease) => () => Awaitable<void>;

/**
 * The store's consume of one entry whose verdict carries `release()` (a single `consume`'s has none),
 * and whose failure, when the call may have counted, carries the `release()` that gives it back by its
 * call id: what the failure guard calls on the stores that have it.
 * @internal
 */
export const consumeReleasable: unique symbol = Symbol('ratewindow.consumeReleasable');

/** What the client threw, as the message a call is fed (as the client gives it). */
function message(error: unknown): string {
  if (error instanceof Error) return error.message;
  return typeof error === 'string' ? error : String(error);
}

/** The errors a client threw during one call, by message (a failure's `cause`). */
type Thrown = Map<string, unknown>;

/**
 * Feeds what the client answered: an array of numbers (what ratewindow's scripts answer) is written
 * into the call record and crosses as its length.
 */
function feed(calls: BackendCalls, record: Float64Array, id: number, kind: StepKind, answer: unknown): string | null {
  if (kind === StepKind.Sql) return calls.feedRows(id, answer);
  if (typeof answer === 'string' && calls.feedText !== undefined) return calls.feedText(id, answer);
  if (Array.isArray(answer) && answer.length <= CALL_RECORD_NUMBERS) {
    const a = answer as unknown[];
    let numbers = true;
    for (let i = 0; i < a.length; i++) if (typeof a[i] !== 'number') numbers = false;
    if (numbers) {
      for (let i = 0; i < a.length; i++) record[CallSlot.Pieces + i] = a[i] as number;
      return calls.feedRecord(id, a.length);
    }
  }
  return calls.feed(id, answer);
}

/** A call being driven: its id, what its client threw, whether it still holds a slot. */
class Driven {
  thrown: Thrown | undefined = undefined;
  open = true;
  constructor(public id: number) {}

  failed(calls: BackendCalls, error: unknown): string | null {
    const text = message(error);
    (this.thrown ??= new Map()).set(text, error);
    return calls.fail(this.id, text);
  }
}

/**
 * Drives the call a start just began (`first`: what it answered) to its end, awaiting each command;
 * `then` reads the outcome from the record (a failure is thrown instead). Frees the call.
 *
 * The common call is one command whose client answers with a native promise: that one is driven by a
 * single `then` on the client's promise (no async frame, no call object); anything else (a failure,
 * a thenable that is not a promise, a second step) continues in {@link driveRest}.
 */
export function drive<T>(
  calls: BackendCalls,
  record: Float64Array,
  first: string | null,
  run: RunCommand,
  then: (record: Float64Array, id: number) => T,
  onGiveBack?: (e: GiveBackError) => void,
  releaser?: Releaser,
): Promise<T> {
  const id: number = record[CallSlot.Id]!;
  const kind: StepKind = record[CallSlot.Kind]!;
  if (kind === StepKind.Script || kind === StepKind.Sql) {
    let answer: unknown;
    try {
      answer = run(kind, id, first);
    } catch (e) {
      return driveRest(calls, record, run, new Driven(id), kind, Promise.reject(e), then, onGiveBack, releaser);
    }
    if (!(answer instanceof Promise)) return driveRest(calls, record, run, new Driven(id), kind, answer, then, onGiveBack, releaser);
    return answer.then(
      (reply: unknown) => {
        let done = false;
        try {
          const command = feed(calls, record, id, kind, reply);
          const next: StepKind = record[CallSlot.Kind]!;
          if (next === StepKind.Script || next === StepKind.Sql || record[CallSlot.Held] !== 0) {
            done = true;
            return driveRest(calls, record, run, new Driven(id), next, command, then, onGiveBack, releaser, true);
          }
          done = true;
          return then(record, id);
        } finally {
          if (!done) calls.end(id);
        }
      },
      (e: unknown) => driveRest(calls, record, run, new Driven(id), kind, Promise.reject(e), then, onGiveBack, releaser),
    );
  }
  return driveRest(calls, record, run, new Driven(id), kind, first, then, onGiveBack, releaser, true);
}

/**
 * {@link drive} from a step already run: `pending` is its client's answer (awaited, then fed); with
 * `fed`, the call already moved past it: the record holds the step to run next (`pending` is then its
 * command) or the outcome.
 */
async function driveRest<T>(
  calls: BackendCalls,
  record: Float64Array,
  run: RunCommand,
  call: Driven,
  kind: StepKind,
  pending: unknown,
  then: (record: Float64Array, id: number) => T,
  onGiveBack?: (e: GiveBackError) => void,
  releaser?: Releaser,
  fed = false,
): Promise<T> {
  try {
    let command = fed ? (pending as string | null) : null;
    if (!fed) {
      let answer: unknown;
      let failed = false;
      try {
        answer = await pending;
      } catch (e) {
        failed = true;
        command = call.failed(calls, e);
      }
      if (!failed) command = feed(calls, record, call.id, kind, answer);
      kind = record[CallSlot.Kind]!;
    }
    while (kind === StepKind.Script || kind === StepKind.Sql) {
      let answer: unknown;
      try {
        answer = await run(kind, call.id, command);
      } catch (e) {
        command = call.failed(calls, e);
        kind = record[CallSlot.Kind]!;
        continue;
      }
      command = feed(calls, record, call.id, kind, answer);
      kind = record[CallSlot.Kind]!;
    }
    return settle(calls, record, call, kind, then, onGiveBack, releaser);
  } finally {
    if (call.open) calls.end(call.id);
  }
}

/** {@link drive} for a synchronous client (SQLite). */
export function driveSync<T>(
  calls: BackendCalls,
  record: Float64Array,
  first: string | null,
  run: RunCommand,
  then: (record: Float64Array, id: number) => T,
  releaser?: Releaser,
): T {
  const call = new Driven(record[CallSlot.Id]!);
  try {
    let command = first;
    let kind: StepKind = record[CallSlot.Kind]!;
    while (kind === StepKind.Script || kind === StepKind.Sql) {
      let answer: unknown;
      try {
        answer = run(kind, call.id, command);
      } catch (e) {
        command = call.failed(calls, e);
        kind = record[CallSlot.Kind]!;
        continue;
      }
      command = feed(calls, record, call.id, kind, answer);
      kind = record[CallSlot.Kind]!;
    }
    return settle(calls, record, call, kind, then, undefined, releaser);
  } finally {
    if (call.open) calls.end(call.id);
  }
}

/**
 * Reports the give-backs that failed, then throws a failed call's error (with `release()`, not
 * enumerable, when the call was asked with its release and may have counted) or reads its outcome.
 */
function settle<T>(
  calls: BackendCalls,
  record: Float64Array,
  call: Driven,
  kind: StepKind,
  then: (record: Float64Array, id: number) => T,
  onGiveBack?: (e: GiveBackError) => void,
  releaser?: Releaser,
): T {
  if (record[CallSlot.Held] === 0) {
    call.open = false;
    return then(record, call.id);
  }
  const thrown = call.thrown ?? new Map();
  if (onGiveBack !== undefined && record[CallSlot.GiveBacks]! > 0) {
    for (const f of calls.giveBackFailures(call.id)) {
      try {
        onGiveBack(new GiveBackError(f.keys, f.callId, thrown.get(f.message) ?? new Error(f.message)));
      } catch {
        // A reporter that throws has nowhere else to report to.
      }
    }
  }
  if (kind === StepKind.Error) {
    const error = callError(calls.error(call.id), thrown);
    if (releaser !== undefined && record[CallSlot.Release] === 1) {
      const token = calls.releaseToken(call.id);
      if (token) Object.defineProperty(error, 'release', { value: releaser(token), enumerable: false, configurable: true });
    }
    throw error;
  }
  return then(record, call.id);
}

/**
 * A failed call's error: the one place where the engine's error kinds become ratewindow's errors. A
 * running call's `unsupported` (e.g. a batch mixing algorithms whose keys span Redis Cluster slots, a
 * batch above the store's most entries a call) is an `UnsupportedError`; its `algorithm` is `'sliding'`
 * unless the caller names the call's (`mixed` names the batch's GCRA or counter algorithm).
 */
export function callError(e: CallErrorInfo, thrown: Thrown = new Map()): Error {
  switch (e.kind) {
    case 'store': {
      const client = e.clientMessage ?? '';
      return new StoreError(e.message, { cause: thrown.has(client) ? thrown.get(client) : new Error(client) });
    }
    case 'reply':
      return new StoreReplyError(e.source ?? 'unknown', e.expected ?? '', e.got ?? '', e.message);
    case 'unsupported':
      return new UnsupportedError('sliding', e.message);
    default:
      return new InternalError(`ratewindow: ${e.message}`);
  }
}

/** A verdict from the call record: single (`consume`, `peek`) or batch, `release` not enumerable. */
export function verdictOf(r: Float64Array, batch: boolean, release?: () => Awaitable<void>): BatchVerdict {
  const allowed = r[CallSlot.Allowed] === 1;
  const v: { -readonly [K in keyof BatchVerdict]: BatchVerdict[K] } = { allowed, retryAfterMs: r[CallSlot.RetryAfterMs]! };
  if (!allowed) {
    const at = r[CallSlot.RetryTimestamp]!;
    if (at === at) v.retryTimestamp = at;
    const blocked = r[CallSlot.Blocked]!;
    if (batch && blocked === blocked) v.blocked = blocked;
  }
  v.limit = r[CallSlot.Limit]!;
  v.remaining = r[CallSlot.Remaining]!;
  v.refillAfterMs = r[CallSlot.RefillAfterMs]!;
  v.resetAfterMs = r[CallSlot.ResetAfterMs]!;
  if (release !== undefined) Object.defineProperty(v, 'release', { value: release, enumerable: false });
  return v;
}

/**
 * A single call's verdict from the record: {@link verdictOf}'s fields in its order, each shape made
 * by one literal (the refused consume's hot path: no property added one by one).
 */
const single = (r: Float64Array): Verdict => {
  const allowed = r[CallSlot.Allowed] === 1;
  const at = r[CallSlot.RetryTimestamp]!;
  if (allowed || at !== at) {
    return {
      allowed,
      retryAfterMs: r[CallSlot.RetryAfterMs]!,
      limit: r[CallSlot.Limit]!,
      remaining: r[CallSlot.Remaining]!,
      refillAfterMs: r[CallSlot.RefillAfterMs]!,
      resetAfterMs: r[CallSlot.ResetAfterMs]!,
    };
  }
  return {
    allowed,
    retryAfterMs: r[CallSlot.RetryAfterMs]!,
    retryTimestamp: at,
    limit: r[CallSlot.Limit]!,
    remaining: r[CallSlot.Remaining]!,
    refillAfterMs: r[CallSlot.RefillAfterMs]!,
    resetAfterMs: r[CallSlot.ResetAfterMs]!,
  };
};
/** A reset's outcome (none), typed as the verdicts it shares a driver with. */
const nothing = (): Verdict => undefined as unknown as Verdict;

/** An attempt's outcome from the record. */
const attempted = (r: Float64Array): AttemptResult => ({ allowed: r[CallSlot.Allowed] === 1, count: r[CallSlot.Value]!, resetAfterMs: r[CallSlot.ResetAfterMs]! });

/** Whether `key` is well-formed UTF-16 (no lone surrogate; `String.prototype.isWellFormed`, Node 20). */
const isWellFormed = (key: string): boolean => (key as unknown as { isWellFormed?: () => boolean }).isWellFormed?.() === true;

/** What the client threw for a planned call: the failure and its message, as a call is fed it. */
function planFailed(calls: BackendCalls, p: CallPlan, n: number, error: unknown): [string | null, Driven] {
  const text = message(error);
  const command = calls.answerFailed!(p.native, n, text, p.key);
  const call = new Driven(0);
  (call.thrown = new Map()).set(text, error);
  return [command, call];
}

/** A lock operation's outcome from the record: whether it took or freed the lock. */
const lockFlag = (r: Float64Array): boolean => r[CallSlot.Value] === 1;

/** What the engine threw while starting a call, as a ratewindow error (`entries`: to name the bad limit). */
export function engineError(error: unknown, backend: Backend, entries?: readonly Entry[], decayMs?: number): Error {
  const code = (error as { code?: unknown } | null)?.code;
  if (typeof code === 'string' && code.startsWith('invalid_limit') && entries !== undefined) {
    for (const e of entries) cooldownLimit(e.limit.uses, e.limit.windowMs, backend);
  }
  if (code === 'store_reply') return new StoreReplyError('purge', 'one row (calls, windows)', '', String((error as Error).message));
  if (code === 'invalid_argument:key') return fromBackend(error); // a key with a lone surrogate: InvalidArgumentError
  if (typeof code === 'string' && code.startsWith('invalid_argument')) return new TypeError((error as Error).message);
  return fromBackend(error, undefined, decayMs);
}

/** A method's answer: at once on a synchronous store (`S` true), else a promise. */
export type Answer<S extends boolean, T> = S extends true ? T : Promise<T>;

/** Whether a batch names a cost other than 1 (its entries unchecked: the weighted path checks them). */
function weighs(entries: readonly Entry[]): boolean {
  if (!Array.isArray(entries)) return false;
  for (const e of entries) {
    const cost = (e as { cost?: unknown } | null)?.cost;
    if (cost !== undefined && cost !== 1) return true;
  }
  return false;
}

/** Whether a batch names a GCRA or counter limit (a mixed batch; its shape is checked when it starts). */
function namesRates(entries: readonly Entry[]): boolean {
  if (!Array.isArray(entries)) return false;
  for (const e of entries) {
    const algorithm = (e as { limit?: { algorithm?: unknown } } | null)?.limit?.algorithm;
    if (algorithm === 'gcra' || algorithm === 'counter') return true;
  }
  return false;
}

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
  /** The call record `calls` writes into (`CALL_RECORD_LENGTH` numbers). */
  protected abstract readonly record: Float64Array;
  protected abstract readonly backend: Backend;
  /** Runs call `id`'s command (a `Script` or `Sql` step) with the user's client. */
  protected abstract runCommand(kind: StepKind, id: number, command: string | null): unknown;
  /** Whether the client answers at once (SQLite's drivers). */
  protected abstract readonly sync: S;

  /** The host clock's reading for a call (only SQLite reads it). */
  protected now(): number {
    return 0;
  }

  /** Whether the store's calls may give back (Redis Cluster's key-by-key fallback). */
  protected readonly reportsGiveBacks: boolean = false;

  /** Where a failed give-back goes (Redis Cluster only). */
  protected giveBackFailed(error: GiveBackError): void {
    // `process` is Node's (the wasm build runs where there is none: the console is the warning there).
    if (typeof process !== 'undefined' && typeof process.emitWarning === 'function') process.emitWarning(error);
    else console.warn(error);
  }

  /** {@link runCommand} as a function made once (a call's driver gets it). */
  private readonly runner: RunCommand = (kind, id, command) => this.runCommand(kind, id, command);

  /** {@link giveBackFailed} as a function made once, for the stores that report give-backs. */
  private readonly giveBacks = (e: GiveBackError): void => this.giveBackFailed(e);

  /** What a start threw (a bad argument, an invalid limit), as the store answers it. */
  private startFailed<T>(e: unknown, entries?: readonly Entry[], decayMs?: number): Answer<S, T> {
    const code = (e as { code?: unknown } | null)?.code;
    let error = e;
    try {
      // engineError throws the invalid limit's own error when it finds it among the entries.
      if (typeof code === 'string' && !code.startsWith('ERR_')) error = engineError(e, this.backend, entries, decayMs);
    } catch (thrown) {
      error = thrown;
    }
    if (this.sync) throw error;
    return Promise.reject(error) as Answer<S, T>;
  }

  /** Drives the call a start just began (`first`: what it answered) and reads its outcome (`then`). */
  private driven<T>(first: string | null, then: (record: Float64Array, id: number) => T): Answer<S, T> {
    if (this.sync) return driveSync(this.calls, this.record, first, this.runner, then, this.releaseOf) as Answer<S, T>;
    return drive(this.calls, this.record, first, this.runner, then, this.reportsGiveBacks ? this.giveBacks : undefined, this.releaseOf) as Answer<S, T>;
  }

  /** The `release` of a held token (an allowed consume's, or a failed one's), made once. */
  private readonly releaseOf: Releaser = (token) => this.releaser(token)!;

  /**
   * The plans of a store whose calls are planned once per key and limit (Redis: `ts/redis-plan.ts`),
   * by kind (0 sliding consume, 1 GCRA, 2 counter, 3 attempt); undefined on the others.
   */
  protected plans: Map<string, CallPlan>[] | undefined = undefined;

  /** The prefix of planned consumes' call ids (the engine's), and how many were sent. */
  private planIds = '';
  private planCount = 0;

  /**
   * By kind, what the Redis key of a planned call starts with, the key following it as it is (the
   * engine's `preparedKeyPrefix`; null: not so, every key planned by the engine), and the last plan
   * the engine made of that kind: a new key of the same limit is planned from it, with no crossing.
   */
  private keyPrefixes: (string | null)[] = [null, null, null, null];
  private lastPlanned: (CallPlan | undefined)[] = [undefined, undefined, undefined, undefined];

  /** Turns the plans on when the engine build has them (a Redis store calls it once made). */
  protected usePlans(): void {
    const c = this.calls;
    if (typeof c.prepareConsume !== 'function' || typeof c.answerFailed !== 'function' || typeof c.preparedIds !== 'function') return;
    this.planIds = c.preparedIds();
    this.plans = [new Map(), new Map(), new Map(), new Map()];
    if (typeof c.preparedKeyPrefix === 'function') this.keyPrefixes = [c.preparedKeyPrefix(0), null, null, c.preparedKeyPrefix(3)];
  }

  /** Sends a planned call's command with the user's client (`args`: the plan's, its call id put in). */
  protected sendPlanned(_p: CallPlan, _args: string[]): unknown {
    throw new InternalError('ratewindow: this store plans no calls');
  }

  /**
   * A single consume's plan (GCRA and counter limits too), or undefined: then the ordinary path runs,
   * checking the arguments and answering any error as before.
   */
  private consumePlan(key: string, limit: AnyLimit): CallPlan | undefined {
    if (typeof key !== 'string' || typeof limit !== 'object' || limit === null) return undefined;
    const algorithm = (limit as { algorithm?: unknown }).algorithm;
    if (algorithm === undefined || algorithm === 'sliding') {
      const { uses, windowMs } = limit as CooldownLimit;
      if (typeof uses !== 'number' || typeof windowMs !== 'number') return undefined;
      return this.plan(0, key, uses, windowMs, 0);
    }
    const g = limit as GcraLimit;
    if (typeof g.uses !== 'number' || typeof g.windowMs !== 'number') return undefined;
    if (algorithm === 'gcra') {
      const burst = g.burst ?? g.uses;
      return typeof burst === 'number' ? this.plan(1, key, g.uses, g.windowMs, burst) : undefined;
    }
    return algorithm === 'counter' ? this.plan(2, key, g.uses, g.windowMs, 0) : undefined;
  }

  /** Kind `kind`'s plan of `key` for these numbers: the kept one, or planned now (undefined: none). */
  private plan(kind: number, key: string, a: number, b: number, c: number): CallPlan | undefined {
    const plans = this.plans![kind]!;
    const p = plans.get(key);
    if (p !== undefined && p.a === a && p.b === b && p.c === c) return p;
    const prefix = this.keyPrefixes[kind]!;
    const last = this.lastPlanned[kind];
    let made: CallPlan | undefined;
    // A key the engine would refuse (a lone surrogate) is planned by the engine, which refuses it.
    if (prefix !== null && last !== undefined && last.a === a && last.b === b && last.c === c && isWellFormed(key)) {
      made = last.forKey(key, prefix + key);
    } else {
      const calls = this.calls;
      try {
        const joined =
          kind === 0 ? calls.prepareConsume!(key, a, b) : kind === 3 ? calls.prepareAttempt!(key, a, b) : calls.prepareRate!(0, key, kind, a, b, c, 1);
        made = CallPlan.of(this.record, joined, calls.prepared!(), a, b, c);
      } catch {
        // A refused argument or limit: the ordinary path answers it with its typed error.
        return undefined;
      }
      if (made === undefined) return undefined;
      // Other keys of this limit are planned from this one when its keys are as the prefix says.
      if (prefix !== null && made.keys.length === 1 && made.keys[0] === prefix + key) this.lastPlanned[kind] = made;
    }
    if (plans.size >= PLAN_KEYS) plans.clear();
    plans.set(key, made);
    return made;
  }

  /** Sends a planned call and reads its reply (`then`: its outcome from the record). */
  private sendPlan<T>(p: CallPlan, then: (record: Float64Array, id: number) => T): Promise<T> {
    let n = 0;
    let args = p.args;
    if (p.idAt >= 0) {
      n = this.planCount++;
      args = args.slice();
      args[p.idAt] = this.planIds + n.toString(16);
    }
    let answer: unknown;
    try {
      answer = this.sendPlanned(p, args);
    } catch (e) {
      answer = Promise.reject(e);
    }
    if (answer instanceof Promise) {
      return answer.then(
        (reply: unknown) => this.planAnswered(p, n, reply, false, then),
        (e: unknown) => this.planAnswered(p, n, e, true, then),
      );
    }
    return Promise.resolve(answer).then(
      (reply: unknown) => this.planAnswered(p, n, reply, false, then),
      (e: unknown) => this.planAnswered(p, n, e, true, then),
    );
  }

  /**
   * A planned call's reply (or, `failed`, what its client threw) handed to the engine in one crossing;
   * a call with more to do (the source after `NOSCRIPT`) or an error is driven on as any call.
   */
  private planAnswered<T>(p: CallPlan, n: number, reply: unknown, failed: boolean, then: (record: Float64Array, id: number) => T): Promise<T> | T {
    const calls = this.calls;
    const r = this.record;
    let command: string | null;
    let call: Driven | undefined;
    if (failed) {
      [command, call] = planFailed(calls, p, n, reply);
    } else if (typeof reply === 'string') {
      command = calls.answerText!(p.native, n, reply, p.key);
    } else {
      command = null;
      let numbers = Array.isArray(reply) && reply.length <= CALL_RECORD_NUMBERS;
      if (numbers) {
        const a = reply as unknown[];
        for (let i = 0; i < a.length; i++) if (typeof a[i] !== 'number') numbers = false;
        if (numbers) {
          for (let i = 0; i < a.length; i++) r[CallSlot.Pieces + i] = a[i] as number;
          command = calls.answerRecord!(p.native, n, a.length, p.key);
        }
      }
      if (!numbers) command = calls.answer!(p.native, n, reply, p.key);
    }
    const id: number = r[CallSlot.Id]!;
    const kind: StepKind = r[CallSlot.Kind]!;
    if (kind === StepKind.Script || kind === StepKind.Sql || r[CallSlot.Held] !== 0) {
      call ??= new Driven(id);
      call.id = id;
      return driveRest(calls, r, this.runner, call, kind, command, then, this.reportsGiveBacks ? this.giveBacks : undefined, this.releaseOf, true);
    }
    return then(r, id);
  }

  /** Starts a call (`begin` checks the arguments too), drives it, reads its outcome (`then`), frees it. */
  protected go<T>(begin: () => string | null, then: (record: Float64Array, id: number) => T, entries?: readonly Entry[], decayMs?: number): Answer<S, T> {
    let first: string | null;
    try {
      first = begin();
    } catch (e) {
      return this.startFailed(e, entries, decayMs);
    }
    return this.driven(first, then);
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

  /**
   * Counts one call to `key` under `limit`: allowed and recorded, or refused with the wait. A
   * {@link GcraLimit} or {@link CounterLimit} (with `options.cost`) is counted by its own script (Redis)
   * or statement (PostgreSQL, SQLite); batches mixing them with the sliding log run on every store
   * (`consumeMany`; on PostgreSQL as one statement).
   */
  override consume(key: string, limit: AnyLimit, options?: CallOptions): Answer<S, Verdict> {
    if (options === undefined && this.plans !== undefined) {
      const p = this.consumePlan(key, limit);
      if (p !== undefined) return this.sendPlan(p, single) as Answer<S, Verdict>;
    }
    // The hot path: no closure made per call.
    let first: string | null;
    try {
      checkKey(key);
      if (rateKind(limit) !== 0) return this.rate(0, key, limit, options);
      checkLimitShape(limit);
      if (options !== undefined) {
        const cost = costOf(options);
        if (cost !== 1) return this.weighted(0, [{ key, limit, cost }], false);
      }
      first = this.calls.consumeOne(key, limit.uses, limit.windowMs, this.now());
    } catch (e) {
      return this.startFailed(e, [{ key, limit }]);
    }
    return this.driven(first, single);
  }

  /**
   * {@link consume} whose verdict carries `release()` (not enumerable), and whose failure, when the call
   * may have counted (its reply lost after the script ran), carries the `release()` that gives it back
   * by its call id (idempotent). What the failure guard calls. With `wanted`, an allowed verdict
   * carries `release()` only if `wanted()` says so when it arrives (the guard: a late answer), and
   * an answer in time costs nothing more than {@link consume}'s.
   * @internal
   */
  [consumeReleasable](key: string, limit: CooldownLimit, wanted?: () => boolean): Answer<S, Verdict> {
    let first: string | null;
    try {
      checkKey(key);
      checkLimitShape(limit);
      first = this.calls.consumeOne(key, limit.uses, limit.windowMs, this.now(), true);
    } catch (e) {
      return this.startFailed(e, [{ key, limit }]);
    }
    return this.driven(first, wanted === undefined ? this.releasable : (r, id) => (wanted() ? this.releasable(r, id) : single(r)));
  }

  /** A single verdict with its `release`, from the record. */
  private readonly releasable = (r: Float64Array, id: number): Verdict =>
    verdictOf(r, false, this.releaser(r[CallSlot.Release] === 1 ? (this.calls.releaseToken(id) ?? undefined) : undefined));

  /**
   * A weighted sliding-log call (`op` 0 consume, 1 peek), each entry costing its `cost` (default 1):
   * the engine's weighted entry point, so calls costing 1 keep theirs. An allowed consume's
   * `release()` gives back exactly the call's cost. A build without the engine's weighted entry point
   * is `UnsupportedError('weighted sliding')`, nothing written.
   */
  private weighted(op: 0 | 1, entries: readonly Entry[], batch: boolean): Answer<S, BatchVerdict> {
    let first: string | null;
    let costs: number[] = [];
    try {
      checkEntries(entries);
      costs = entries.map((e) => costOf(e));
      const calls = this.calls;
      if (calls.weighted === undefined) throw new UnsupportedError('weighted sliding', 'weighted calls on the sliding log: not in this build (the native addon counts them)');
      first = calls.weighted(op, ...columns(entries), costs, batch, op === 0 && batch, this.now());
    } catch (e) {
      const code = (e as { code?: unknown } | null)?.code;
      if (code === 'invalid_argument:cost') {
        const at = /^invalid entries\[(\d+)\]\.cost:/.exec(String((e as Error).message))?.[1];
        const error = fromBackend(e, undefined, undefined, undefined, at === undefined ? costs[0] : costs[Number(at)]);
        if (this.sync) throw error;
        return Promise.reject(error) as Answer<S, BatchVerdict>;
      }
      return this.startFailed(e, entries);
    }
    if (!batch) return this.driven(first, single);
    return this.driven(first, (r, id) => verdictOf(r, true, op === 0 ? this.releaser(r[CallSlot.Release] === 1 ? (this.calls.releaseToken(id) ?? undefined) : undefined) : undefined));
  }

  /**
   * A batch mixing algorithms (`op` 0 consume, 1 peek): sliding-log, GCRA and counter entries in one
   * all-or-nothing call, decided by the engine as the memory store decides it. SQLite and Redis (on a
   * Cluster, keys in one slot: a hash tag; keys across slots: `UnsupportedError`, nothing written) and
   * PostgreSQL (one statement). An allowed consume's `release()` gives back its sliding-log calls
   * (GCRA and counter uses are not given back on a networked store).
   */
  private mixed(op: 0 | 1, entries: readonly Entry[]): Answer<S, BatchVerdict> {
    let first: string | null;
    const n = entries.length;
    const keys: string[] = new Array(n);
    const kinds: number[] = new Array(n);
    const uses: number[] = new Array(n);
    const windows: number[] = new Array(n);
    const bursts: number[] = new Array(n);
    const costs: number[] = new Array(n);
    // What an UnsupportedError names: the first GCRA or counter entry's algorithm (as Python's does).
    let algorithm: string | undefined;
    try {
      for (let i = 0; i < n; i++) {
        const entry = entries[i] as Entry | null;
        if (typeof entry !== 'object' || entry === null) throw typeError('each entry must be { key, limit, cost? }', entry);
        checkKey(entry.key);
        const kind = rateKind(entry.limit);
        if (kind === 0) checkLimitShape(entry.limit);
        const limit = entry.limit as GcraLimit;
        if (kind !== 0) algorithm ??= limit.algorithm;
        keys[i] = entry.key;
        kinds[i] = kind;
        uses[i] = limit.uses;
        windows[i] = limit.windowMs;
        bursts[i] = kind === 1 ? (limit.burst ?? limit.uses) : 0;
        costs[i] = costOf(entry);
      }
      const calls = this.calls;
      if (calls.mixed === undefined) throw new UnsupportedError(algorithm ?? 'gcra', 'batches mixing algorithms: not in this build (the native addon counts them)');
      first = calls.mixed(op, keys, kinds, uses, windows, bursts, costs, this.now());
    } catch (e) {
      const code = (e as { code?: unknown } | null)?.code;
      let error = e;
      if (typeof code === 'string' && !code.startsWith('ERR_')) {
        const at = /^invalid entries\[(\d+)\]\./.exec(String((e as Error).message))?.[1];
        const i = at === undefined ? 0 : Number(at);
        error = fromBackend(e, uses[i], windows[i], kinds[i] === 1 ? bursts[i] : undefined, costs[i]);
      }
      if (this.sync) throw error;
      return Promise.reject(error) as Answer<S, BatchVerdict>;
    }
    const then = (r: Float64Array, id: number): BatchVerdict =>
      verdictOf(r, true, op === 0 ? this.releaser(r[CallSlot.Release] === 1 ? (this.calls.releaseToken(id) ?? undefined) : undefined) : undefined);
    // A running call's UnsupportedError (keys across Cluster slots) names the batch's algorithm, as the
    // refusal of a store that runs no mixed batch does.
    const named = (e: unknown): never => {
      if (e instanceof UnsupportedError) Object.defineProperty(e, 'algorithm', { value: algorithm ?? 'gcra' });
      throw e;
    };
    if (this.sync) {
      try {
        return this.driven(first, then);
      } catch (e) {
        return named(e);
      }
    }
    return (this.driven(first, then) as Promise<BatchVerdict>).catch(named) as Answer<S, BatchVerdict>;
  }

  /**
   * A GCRA or counter call (`op` 0 consume, 1 peek, 2 reset), its arguments checked here. Its verdict
   * has no `release` (these uses are not given back); a reset answers `undefined`.
   */
  private rate(op: 0 | 1 | 2, key: unknown, limit: unknown, options: unknown): Answer<S, Verdict> {
    let first: string | null;
    let given: GcraLimit | undefined;
    let cost = 1;
    try {
      checkKey(key);
      const kind = rateKind(limit);
      if (kind === 0) throw typeError("reset takes a GCRA or counter limit ({ algorithm: 'gcra' | 'counter', ... })", limit);
      given = limit as GcraLimit;
      if (op !== 2) cost = costOf(options);
      const calls = this.calls;
      if (calls.rate === undefined) throw new UnsupportedError(given.algorithm, `this build does not count ${given.algorithm} limits (the native addon does)`);
      const burst = kind === 1 ? (given.burst ?? given.uses) : 0;
      first = calls.rate(op, key, kind, given.uses, given.windowMs, burst, cost, this.rateClock());
    } catch (e) {
      const code = (e as { code?: unknown } | null)?.code;
      let error = e;
      if (code === 'invalid_argument:store' && given !== undefined) error = new UnsupportedError(given.algorithm);
      else if (typeof code === 'string' && !code.startsWith('ERR_')) error = fromBackend(e, given?.uses, given?.windowMs, given?.burst, cost);
      if (this.sync) throw error;
      return Promise.reject(error) as Answer<S, Verdict>;
    }
    return this.driven(first, op === 2 ? nothing : single);
  }

  /**
   * The time a GCRA or counter call is decided at: `null` for the server's clock (Redis, PostgreSQL);
   * SQLite's host clock. Tests override it to run the vectors at their times.
   */
  protected rateClock(): number | null {
    return null;
  }

  /**
   * Forgets `key`'s GCRA bucket or counter (by `limit`'s algorithm): its next call finds every use
   * there. A sliding-log limit is a `TypeError`.
   */
  reset(key: string, limit: GcraLimit | CounterLimit): Answer<S, void> {
    return this.rate(2, key, limit, undefined) as unknown as Answer<S, void>;
  }

  /** The verdict {@link consume} would give, recording nothing. */
  peek(key: string, limit: AnyLimit, options?: CallOptions): Answer<S, Verdict> {
    let kind: number;
    try {
      kind = rateKind(limit);
    } catch (e) {
      return this.startFailed(e);
    }
    if (kind !== 0) return this.rate(1, key, limit, options);
    if (options !== undefined) {
      let cost: number;
      try {
        cost = costOf(options);
      } catch (e) {
        return this.startFailed(e);
      }
      if (cost !== 1) return this.weighted(1, [{ key, limit, cost }], false);
    }
    return this.go(
      () => {
        checkKey(key);
        checkLimitShape(limit);
        return this.calls.peek([key], [limit.uses], [limit.windowMs], this.now());
      },
      single,
      [{ key, limit }],
    );
  }

  /**
   * Counts one call against every entry at once, all or nothing; a refusal names `blocked`, the entry
   * with the longest wait. An allowed verdict carries `release()` (not enumerable), which gives back
   * exactly this call.
   */
  override consumeMany(entries: readonly Entry[]): Answer<S, BatchVerdict> {
    if (namesRates(entries)) return this.mixed(0, entries);
    if (weighs(entries)) return this.weighted(0, entries, true);
    return this.go(
      () => {
        checkEntries(entries);
        return this.calls.consume(...columns(entries), true, this.now());
      },
      (r, id) => verdictOf(r, true, this.releaser(r[CallSlot.Release] === 1 ? (this.calls.releaseToken(id) ?? undefined) : undefined)),
      entries,
    );
  }

  /** The verdict {@link consumeMany} would give, recording nothing. */
  override peekMany(entries: readonly Entry[]): Answer<S, BatchVerdict> {
    if (namesRates(entries)) return this.mixed(1, entries);
    if (weighs(entries)) return this.weighted(1, entries, true);
    return this.go(
      () => {
        checkEntries(entries);
        return this.calls.peek(...columns(entries), this.now());
      },
      (r) => verdictOf(r, true),
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
      (r) => r[CallSlot.Value]!,
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
      (r): HitResult => ({ count: r[CallSlot.Value]!, resetAfterMs: r[CallSlot.ResetAfterMs]! }),
      undefined,
      decayMs,
    );
  }

  /**
   * Fixed window, atomically: counts one hit on `key` if it has fewer than `max` in its window (opening
   * one of `decayMs` ms if none runs), else nothing. Exactly `max` attempts are allowed per window,
   * however many run at once. With `options.cost`, the attempt takes `cost` hits, counted only when
   * the count plus `cost` is at most `max` (else nothing).
   */
  attempt(key: string, max: number, decayMs: number, options?: CallOptions): Answer<S, AttemptResult> {
    if (options === undefined && this.plans !== undefined && typeof key === 'string' && typeof decayMs === 'number' && Number.isSafeInteger(max)) {
      const p = this.plan(3, key, max, decayMs, 0);
      if (p !== undefined) return this.sendPlan(p, attempted) as Answer<S, AttemptResult>;
    }
    let cost = 1;
    return this.go(
      () => {
        checkKey(key);
        if (typeof decayMs !== 'number') throw typeError('decayMs must be a number', decayMs);
        if (options !== undefined) cost = costOf(options);
        if (cost === 1) return this.calls.attempt(key, checkInteger('max', max), decayMs, this.now());
        const calls = this.calls;
        if (calls.attemptCost === undefined) throw new UnsupportedError('weighted attempt', 'an attempt with a cost: not in this build (the native addon counts them)');
        try {
          return calls.attemptCost(key, checkInteger('max', max), decayMs, cost, this.now());
        } catch (e) {
          if ((e as { code?: unknown } | null)?.code === 'invalid_argument:cost') throw fromBackend(e, undefined, undefined, undefined, cost);
          throw e;
        }
      },
      attempted,
      undefined,
      decayMs,
    );
  }

  private read<T>(key: string, query: WindowQuery, max: number, value: (r: Float64Array) => T): Answer<S, T> {
    return this.go(() => {
      checkKey(key);
      return this.calls.read(key, query, checkInteger('max', max), this.now());
    }, value);
  }

  /** Hits counted in `key`'s current window; 0 when it has none. */
  attempts(key: string): Answer<S, number> {
    return this.read(key, 'attempts', 0, (r) => r[CallSlot.Value]!);
  }

  /** Whether `key` has `max` or more hits in a window that still runs. */
  tooManyAttempts(key: string, max: number): Answer<S, boolean> {
    return this.read(key, 'tooManyAttempts', max, (r) => r[CallSlot.Value] === 1);
  }

  /** `max` minus the hits in `key`'s current window, floored at 0. */
  remaining(key: string, max: number): Answer<S, number> {
    return this.read(key, 'remaining', max, (r) => r[CallSlot.Value]!);
  }

  /** Whole seconds until `key`'s window ends, rounded up; 0 when it has none. */
  availableIn(key: string): Answer<S, number> {
    return this.read(key, 'availableIn', 0, (r) => r[CallSlot.Value]!);
  }

  /** Milliseconds until `key`'s window ends; 0 when it has none. */
  availableInMs(key: string): Answer<S, number> {
    return this.read(key, 'availableInMs', 0, (r) => r[CallSlot.Value]!);
  }

  /** Sets `key`'s count to zero, keeping its window running. */
  resetAttempts(key: string): Answer<S, void> {
    return this.go(() => (checkKey(key), this.calls.resetAttempts(key, this.now())), () => undefined);
  }

  /** Removes `key`'s count and window; its next hit opens a new window. */
  clear(key: string): Answer<S, void> {
    return this.go(() => (checkKey(key), this.calls.clear(key, this.now())), () => undefined);
  }

  /** The lock operations, run as calls of this store (see `ts/lock.ts`). */
  private readonly lockDriver: LockDriver = ((store: CallStore<S>): LockDriver => ({
    get backend(): LockBackend {
      return store.backend as LockBackend;
    },
    checkedTtl: undefined,
    lockRun: (op, key, owner, ttl) => store.lockCall(op, key, owner ?? null, ttl, lockFlag),
    lockOwner: (key) => store.lockCall('owner', key, null, 0, store.lockHolder),
    prepare: (key, owner, ttl, given) => store.prepareLock(key, owner, ttl, given),
  }))(this);

  /**
   * Plans a lock's acquire and release once (checking its TTL and owner), or undefined: each of its
   * operations is then a call. The Redis store with plain commands plans them (`ts/redis-lock.ts`).
   */
  protected prepareLock(_key: string, _owner: string, _ttl: number, _given: boolean): PreparedLock | undefined {
    return undefined;
  }

  /**
   * A prepared lock's operation whose command already ran and whose reply is no answer (or whose
   * client failed: `failed`): started as a call and fed what came, so the engine decides it (the
   * script's source after `NOSCRIPT`, else the typed error).
   */
  protected lockAnswered(op: 'acquire' | 'release', key: string, owner: string, ttl: number, answer: unknown, failed: boolean): Promise<boolean> {
    const calls = this.calls;
    try {
      if (typeof calls.lock !== 'function') throw new TypeError('this engine build has no lock (rebuild the addon)');
      calls.lock(op, key, owner, ttl, this.now());
    } catch (e) {
      return Promise.reject(e);
    }
    const r = this.record;
    return driveRest(calls, r, this.runner, new Driven(r[CallSlot.Id]!), r[CallSlot.Kind]!, failed ? Promise.reject(answer) : answer, lockFlag);
  }

  /** An `Owner` outcome: the holder's token, or null. */
  private readonly lockHolder = (_r: Float64Array, id: number): string | null => this.calls.lockOwner?.(id) ?? null;

  /** Starts a lock operation and drives it (`then` reads its outcome): no closure made per call. */
  private lockCall<T>(op: string, key: string, owner: string | null, ttl: number, then: (r: Float64Array, id: number) => T): Answer<S, T> {
    const calls = this.calls;
    let first: string | null;
    try {
      if (typeof calls.lock !== 'function') throw new TypeError('this engine build has no lock (rebuild the addon)');
      first = calls.lock(op, key, owner, ttl, this.now());
    } catch (e) {
      return this.startFailed(e);
    }
    return this.driven(first, then);
  }

  /**
   * A lock on `key` held for `ttl` seconds once taken (on the store's clock), owned by `owner`
   * (default: a fresh token; pass another lock's `owner` to restore it in another process).
   */
  lock(key: string, ttl: number, owner?: string): Lock {
    return new Lock(this.lockDriver, key, ttl, owner);
  }

  /** Runs `fn` holding the lock `key` (see {@link withLock}). */
  withLock<T>(key: string, ttl: number, fn: () => T | Promise<T>, options?: WithLockOptions): Promise<T> {
    return withLock(this, key, ttl, fn, options);
  }
}

/** A store's backend as the lock reads it (its lock parts are optional). */
function lockBackendOf(store: unknown): LockBackend {
  return (store as { backend: LockBackend }).backend;
}

