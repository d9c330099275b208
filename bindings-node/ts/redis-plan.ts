/**
 * A Redis store's calls planned once per key and limit (issue 12): the engine plans a single consume
 * costing 1, an attempt costing 1, or a GCRA / counter consume or peek in one crossing
 * (`prepareConsume`, `prepareAttempt`, `prepareRate`); the store keeps the command's keys and arguments
 * for the last keys, and each call sends them again (a consume with its own call id put in: the
 * engine's id prefix and the store's count). The reply then crosses once (`answerText`,
 * `answerRecord`, `answer`, or the client's failure `answerFailed`): the engine starts the call and
 * feeds it what came in one step, so it decides everything as before — the verdict, the typed error
 * of a reply of another shape, and the source after `NOSCRIPT` (then driven as any call).
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
  ) {}

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
