/**
 * A Redis store's calls planned once per key and limit (issue 12): the engine plans a single consume
 * costing 1, an attempt costing 1, or a GCRA / counter consume or peek in one crossing
 * (`prepareConsume`, `prepareAttempt`, `prepareRate`); the store keeps the command's keys and arguments
 * for the last keys, and each call sends them again (a consume with its own call id put in: the
 * engine's id prefix and the store's count). The reply then crosses once (`answerText`,
 * `answerRecord`, `answer`, or the client's failure `answerFailed`): the engine starts the call and
 * feeds it what came in one step, so it decides everything as before — the verdict, the typed error
 * of a reply of another shape, and the source after `NOSCRIPT` (then driven as any call). A new key
 * of a consume or an attempt whose limit was planned for another key is planned without a crossing:
 * the engine says what its Redis keys start with (`preparedKeyPrefix`), the arguments are the same,
 * and the key is named with the reply (for the call to run on with when the reply is no answer).
 * @module
 * @internal
 */
import { CallSlot } from './redis-backend';

/** Plans kept per kind of call (sliding, attempt, GCRA, counter): one per key, the last limit's. */
export const PLAN_KEYS = 16_384;

/** A call's command as the engine planned it, for one key and limit. */
export class CallPlan {
  constructor(
    /** The limit it was planned for (uses or max; window or decay; GCRA's burst, else 0). */
    readonly a: number,
    readonly b: number,
    readonly c: number,
    /** The engine's operation (handed back with each reply). */
    readonly native: object,
    readonly keys: string[],
    readonly args: string[],
    /** The argument holding the call id (-1: none, the arguments are sent as they are). */
    readonly idAt: number,
    /** The script slot (`CallSlot.Script`) and whether by SHA1. */
    readonly script: number,
    readonly bySha1: boolean,
    /**
     * The key this plan was made for from another key's (`native` is that key's operation: the
     * engine is named this key with each reply); undefined when `native` is this key's own.
     */
    readonly key?: string,
  ) {}

  /**
   * This plan's command for another key of the same limit (the engine's `preparedKeyPrefix`: the
   * Redis key is `redisKey`, every argument the same), with no crossing.
   */
  forKey(key: string, redisKey: string): CallPlan {
    return new CallPlan(this.a, this.b, this.c, this.native, [redisKey], this.args, this.idAt, this.script, this.bySha1, key);
  }

  /**
   * The plan a `prepare*` just answered (`joined` cut by `record`), or undefined when its command does
   * not fit the record (then every call of it is an ordinary one).
   */
  static of(record: Float64Array, joined: string | null, native: object, a: number, b: number, c: number): CallPlan | undefined {
    const nKeys = record[CallSlot.Keys]!;
    const idAt = record[CallSlot.Value]!;
    if (joined === null || nKeys < 0 || idAt < -1) return undefined;
    const nArgs = record[CallSlot.Args]!;
    let at = 0;
    const keys = new Array<string>(nKeys);
    for (let i = 0; i < nKeys; i++) keys[i] = joined.slice(at, (at += record[CallSlot.Pieces + i]!));
    const args = new Array<string>(nArgs);
    for (let i = 0; i < nArgs; i++) args[i] = joined.slice(at, (at += record[CallSlot.Pieces + nKeys + i]!));
    return new CallPlan(a, b, c, native, keys, args, idAt < 0 ? -1 : idAt - nKeys, record[CallSlot.Script]!, record[CallSlot.BySha1] === 1);
  }
}
