/**
 * A Redis lock's commands planned once (`RedisStore` with `command`): the engine plans a key's acquire
 * (`SET key owner NX PX ttl`) and release (the lock script's keys and arguments) in one crossing
 * (`lockCommands`), with the owner's places; the store keeps the plans of its last keys and TTLs, so a
 * new lock on one of them is those arrays with its owner put in, and no crossing. Each acquire and
 * release then sends the lock's arrays (a lock's key, owner and TTL never change) and hands the reply to the engine's `lockAnswer`, which
 * reads `OK` / null / 1 / 0 in each client's spelling. Anything else — the client's failure, a
 * `NOSCRIPT`, a reply of another shape — starts the operation as an ordinary call fed what came, so the
 * call machine decides it (the source after `NOSCRIPT`, the typed error otherwise) exactly as before.
 * @module
 * @internal
 */
import type { PreparedLock } from './lock';
import { CallSlot } from './redis-backend';

/** What a prepared lock needs from its store. */
export interface PreparedLockHost {
  /** Sends the acquire's plain command with the user's client. */
  sendAcquire(args: string[]): unknown;
  /** Sends the release's lock script (by SHA1 when `bySha1`) with the user's client. */
  sendRelease(bySha1: boolean, keys: string[], args: string[]): unknown;
  /** The engine's reading of a reply: 1 taken/freed, 0 not, -1 no answer. */
  answer(acquire: boolean, reply: unknown): number;
  /** The operation as a call whose first command already ran: fed `answer` (or the failure `error`). */
  answered(op: 'acquire' | 'release', key: string, owner: string, ttl: number, answer: unknown, failed: boolean): Promise<boolean>;
}

/**
 * A lock's commands on one key and TTL as the engine planned them, with the owner's places: another
 * owner's lock on that key and TTL sends these with its owner there (the store keeps a few plans).
 */
export class RedisLockPlan {
  private constructor(
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
  static of(record: Float64Array, joined: string | null): RedisLockPlan | undefined {
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
    return new RedisLockPlan(acquire, record[CallSlot.Allowed]!, keys, args, record[CallSlot.RetryAfterMs]!, record[CallSlot.BySha1] === 1);
  }

  /**
   * The lock of `owner` on this plan's key and TTL: its own copies of the arrays (the plan's are never
   * handed to a client; not frozen either: V8 slices and spreads a frozen array 2-20x slower).
   */
  lock(host: PreparedLockHost, key: string, owner: string, ttl: number): PreparedRedisLock {
    const acquire = this.acquireArgs.slice();
    acquire[this.acquireOwner] = owner;
    const args = this.releaseArgs.slice();
    args[this.releaseOwner] = owner;
    return new PreparedRedisLock(host, key, owner, ttl, acquire, this.releaseKeys.slice(), args, this.bySha1);
  }
}

/** A lock's commands, planned by the engine (see the module). */
export class PreparedRedisLock implements PreparedLock {
  /** @internal Made by {@link RedisLockPlan.lock}. */
  constructor(
    private readonly host: PreparedLockHost,
    private readonly key: string,
    private readonly owner: string,
    private readonly ttl: number,
    private readonly acquireArgs: string[],
    private readonly releaseKeys: string[],
    private readonly releaseArgs: string[],
    private readonly bySha1: boolean,
  ) {}

  acquire(): Promise<boolean> {
    const host = this.host;
    let sent: unknown;
    try {
      sent = host.sendAcquire(this.acquireArgs);
    } catch (e) {
      return host.answered('acquire', this.key, this.owner, this.ttl, e, true);
    }
    if (!(sent instanceof Promise)) return this.settle(true, Promise.resolve(sent));
    return this.settle(true, sent);
  }

  release(): Promise<boolean> {
    const host = this.host;
    let sent: unknown;
    try {
      sent = host.sendRelease(this.bySha1, this.releaseKeys, this.releaseArgs);
    } catch (e) {
      return host.answered('release', this.key, this.owner, this.ttl, e, true);
    }
    if (!(sent instanceof Promise)) return this.settle(false, Promise.resolve(sent));
    return this.settle(false, sent);
  }

  /** The answer in the client's reply (one `then`), or the operation as a call when it is none. */
  private settle(acquire: boolean, sent: Promise<unknown>): Promise<boolean> {
    const host = this.host;
    const op = acquire ? 'acquire' : 'release';
    return sent.then(
      (reply) => {
        const a = host.answer(acquire, reply);
        return a >= 0 ? a === 1 : host.answered(op, this.key, this.owner, this.ttl, reply, false);
      },
      (e: unknown) => host.answered(op, this.key, this.owner, this.ttl, e, true),
    );
  }
}
