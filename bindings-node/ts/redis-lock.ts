/**
 * A Redis lock's commands planned once (`RedisStore` with `command`): the engine plans a key's acquire
 * (`SET key owner NX PX ttl`) and release (the lock script's keys and arguments) in one crossing
 * (`lockCommands`), with the owner's places; the store keeps the plans of its last keys (each its last
 * TTL's), and every lock on one of them holds that plan (no object of its own beside the `Lock`). Each acquire and
 * release sends the plan's arrays, copied with the lock's owner put in, and looks the reply up among
 * the replies the engine listed as answers (`lockAnswers`: `'OK'` / null / 1 / 0 in each client's
 * spelling) — no crossing a reply. Anything else — the client's failure, a `NOSCRIPT`, a reply of
 * another shape — starts the operation as an ordinary call fed what came, so the call machine decides
 * it (the source after `NOSCRIPT`, the typed error otherwise) exactly as before.
 * @module
 * @internal
 */
import type { PreparedLock } from './lock';
import { CallSlot } from './redis-backend';

/** What a store's planned locks need from it. */
export interface PreparedLockHost {
  /** Sends the acquire's plain command with the user's client. */
  sendAcquire(args: string[]): unknown;
  /** Sends the release's lock script (by SHA1 when `bySha1`) with the user's client. */
  sendRelease(bySha1: boolean, keys: string[], args: string[]): unknown;
  /** The replies that answer the acquire, and their answers (the engine's `lockAnswers(true)`). */
  readonly acquireAnswers: ReadonlyMap<unknown, boolean>;
  /** The replies that answer the release (`lockAnswers(false)`). */
  readonly releaseAnswers: ReadonlyMap<unknown, boolean>;
  /** The operation as a call whose first command already ran: fed `answer` (or the failure `error`). */
  answered(op: 'acquire' | 'release', key: string, owner: string, ttl: number, answer: unknown, failed: boolean): Promise<boolean>;
}

/**
 * The engine's answer table as a map from the reply as a client decodes it: a string or a number as
 * it is, nil as both `null` and `undefined` (how the clients spell it).
 */
export function answerMap(answers: ReadonlyArray<{ text?: string | null; int?: number | null; answer: boolean }>): Map<unknown, boolean> {
  const map = new Map<unknown, boolean>();
  for (const a of answers) {
    if (typeof a.text === 'string') map.set(a.text, a.answer);
    else if (typeof a.int === 'number') map.set(a.int, a.answer);
    else {
      map.set(null, a.answer);
      map.set(undefined, a.answer);
    }
  }
  return map;
}

/**
 * A key's lock commands on one TTL as the engine planned them, with the owner's places: every lock on
 * that key and TTL sends these with its owner there (the store keeps a few thousand plans, one a key).
 */
export class RedisLockPlan implements PreparedLock {
  private constructor(
    private readonly host: PreparedLockHost,
    private readonly key: string,
    /** The TTL it was planned for. */
    readonly ttl: number,
    private readonly acquireArgs: readonly string[],
    private readonly acquireOwner: number,
    private readonly releaseKeys: readonly string[],
    private readonly releaseArgs: readonly string[],
    private readonly releaseOwner: number,
    private readonly bySha1: boolean,
  ) {}

  /**
   * The plan `lockCommands` just answered (`joined`, cut by the lengths in `record`), or undefined when
   * the store runs every lock operation as a call.
   */
  static of(host: PreparedLockHost, key: string, ttl: number, record: Float64Array, joined: string | null): RedisLockPlan | undefined {
    if (joined === null) return undefined;
    let at = 0;
    let i = CallSlot.Pieces;
    const cut = (n: number): string[] => {
      const out = new Array<string>(n);
      for (let j = 0; j < n; j++) out[j] = joined.slice(at, (at += record[i++]!));
      return out;
    };
    const acquire = cut(record[CallSlot.Value]!);
    const keys = cut(record[CallSlot.Keys]!);
    const args = cut(record[CallSlot.Args]!);
    return new RedisLockPlan(host, key, ttl, acquire, record[CallSlot.Allowed]!, keys, args, record[CallSlot.RetryAfterMs]!, record[CallSlot.BySha1] === 1);
  }

  /**
   * `owner`'s acquire: the plan's `SET` with the owner in (a copy each time: a client never gets the
   * plan's own arrays, nor one it could have changed the last time).
   */
  acquire(owner: string): Promise<boolean> {
    const args = this.acquireArgs.slice();
    args[this.acquireOwner] = owner;
    let sent: unknown;
    try {
      sent = this.host.sendAcquire(args);
    } catch (e) {
      return this.host.answered('acquire', this.key, owner, this.ttl, e, true);
    }
    return this.settle(true, owner, sent instanceof Promise ? sent : Promise.resolve(sent));
  }

  /** `owner`'s release: the plan's lock script with the owner in. */
  release(owner: string): Promise<boolean> {
    const args = this.releaseArgs.slice();
    args[this.releaseOwner] = owner;
    let sent: unknown;
    try {
      sent = this.host.sendRelease(this.bySha1, this.releaseKeys.slice(), args);
    } catch (e) {
      return this.host.answered('release', this.key, owner, this.ttl, e, true);
    }
    return this.settle(false, owner, sent instanceof Promise ? sent : Promise.resolve(sent));
  }

  /** The answer the reply is (one `then`, one map lookup), or the operation as a call when it is none. */
  private settle(acquire: boolean, owner: string, sent: Promise<unknown>): Promise<boolean> {
    const host = this.host;
    const answers = acquire ? host.acquireAnswers : host.releaseAnswers;
    return sent.then(
      (reply) => answers.get(reply) ?? host.answered(acquire ? 'acquire' : 'release', this.key, owner, this.ttl, reply, false),
      (e: unknown) => host.answered(acquire ? 'acquire' : 'release', this.key, owner, this.ttl, e, true),
    );
  }
}
