/**
 * Limits of the rate limiter API: {@link Limit}, {@link GlobalLimit} and {@link Unlimited}, in one file
 * because each extends the one before (ESM `extends` needs its base evaluated first).
 * @module
 */
import { InvalidLimitError, invalidLimit, typeError } from './errors';
import { cooldownLimit } from './store';
import type { CooldownLimit } from './types';

/** Called with the guarded operation's result; a hit is recorded only when it returns true. */
export type AfterCallback = (result: unknown) => boolean | Promise<boolean>;
/** Builds the answer given when a limit is exceeded, instead of the default. */
export type ResponseCallback = (...args: unknown[]) => unknown;

/**
 * `maxAttempts` within `decaySeconds`, optionally scoped to a key with {@link by}.
 *
 * A `Limit` is also a {@link CooldownLimit} (`uses` = `maxAttempts`, `windowMs` = `decaySeconds` in
 * milliseconds), so it can be passed to a cooldown store's `consume` as it is.
 *
 * Unlike the seed framework, windows are exact to the millisecond: `decaySeconds` may be fractional
 * (`0.25` is a 250 ms window) and nothing is rounded up to whole seconds.
 *
 * Checked when built: a number that is not one is a `TypeError`; `maxAttempts` outside 1 to 4294967295
 * or a decay that is not a whole number of milliseconds from 1 to 4320000000000000 is an
 * {@link InvalidLimitError} naming the argument (`maxAttempts`, `decaySeconds`, `decayMinutes` ...).
 * ({@link Unlimited} alone holds `Number.MAX_SAFE_INTEGER` attempts: it is never counted.)
 */
export class Limit implements CooldownLimit {
  /** The key the limit counts under ('' until {@link by} sets one). */
  key: string;
  /** Attempts allowed per window. */
  maxAttempts: number;
  /** The window, in seconds. */
  decaySeconds: number;
  /** Set by {@link after}. */
  afterCallback?: AfterCallback;
  /** Set by {@link response}. */
  responseCallback?: ResponseCallback;

  constructor(key = '', maxAttempts = 60, decaySeconds = 60) {
    if (typeof key !== 'string') throw typeError('key must be a string', key);
    if (new.target !== Unlimited) checkLimit(maxAttempts, decaySeconds, 'decaySeconds', decaySeconds);
    this.key = key;
    this.maxAttempts = maxAttempts;
    this.decaySeconds = decaySeconds;
  }

  /** `maxAttempts` per `decaySeconds` seconds (default 1). */
  static perSecond(maxAttempts: number, decaySeconds = 1): Limit {
    return new Limit('', maxAttempts, decaySeconds);
  }

  /** `maxAttempts` per `decayMinutes` minutes (default 1). */
  static perMinute(maxAttempts: number, decayMinutes = 1): Limit {
    return scaled(maxAttempts, decayMinutes, 60, 'decayMinutes');
  }

  /** `maxAttempts` per `decayMinutes` minutes. Note the order: decay first, as Laravel has it. */
  static perMinutes(decayMinutes: number, maxAttempts: number): Limit {
    return scaled(maxAttempts, decayMinutes, 60, 'decayMinutes');
  }

  /** `maxAttempts` per `decayHours` hours (default 1). */
  static perHour(maxAttempts: number, decayHours = 1): Limit {
    return scaled(maxAttempts, decayHours, 3600, 'decayHours');
  }

  /** `maxAttempts` per `decayDays` days (default 1). */
  static perDay(maxAttempts: number, decayDays = 1): Limit {
    return scaled(maxAttempts, decayDays, 86400, 'decayDays');
  }

  /** No limit: consumers check `instanceof Unlimited` and skip limiting. */
  static none(): Unlimited {
    return new Unlimited();
  }

  /** Scopes the limit to `key` (a user id, an IP ...). */
  by(key: string): this {
    this.key = key;
    return this;
  }

  /** Records a hit only when `callback(result)` is truthy. */
  after(callback: AfterCallback): this {
    this.afterCallback = callback;
    return this;
  }

  /** Builds a custom answer when the limit is exceeded. */
  response(callback: ResponseCallback): this {
    this.responseCallback = callback;
    return this;
  }

  /** A key derived from the limit's own attributes: `[key:]attempts:<max>:decay:<seconds>`. */
  fallbackKey(): string {
    return `${this.key ? this.key + ':' : ''}attempts:${this.maxAttempts}:decay:${this.decaySeconds}`;
  }

  /** {@link maxAttempts}, as a {@link CooldownLimit}. */
  get uses(): number {
    return this.maxAttempts;
  }

  /** {@link decaySeconds} in milliseconds, as a {@link CooldownLimit}. */
  get windowMs(): number {
    return secondsToMs(this.decaySeconds);
  }
}

/** A limit with no per-key split: every caller shares one counter. */
export class GlobalLimit extends Limit {
  constructor(maxAttempts: number, decaySeconds = 60) {
    super('', maxAttempts, decaySeconds);
  }
}

/** A marker for "no limit": `maxAttempts` is `Number.MAX_SAFE_INTEGER`. */
export class Unlimited extends GlobalLimit {
  constructor() {
    super(Number.MAX_SAFE_INTEGER);
  }
}

/** What a decay in seconds (or minutes ...) must make, in words. @internal */
export const DECAY_RANGE = 'a decay making a whole number of milliseconds from 1 to 4320000000000000';

/**
 * Checks `maxAttempts` and `decaySeconds` with the engine, naming the refused argument: `maxAttempts`, or
 * `argument` holding `given` (the decay as the caller wrote it, in its own unit).
 */
function checkLimit(maxAttempts: unknown, decaySeconds: unknown, argument: string, given: unknown): void {
  if (typeof maxAttempts !== 'number') throw typeError('maxAttempts must be a number', maxAttempts);
  if (typeof decaySeconds !== 'number') throw typeError(`${argument} must be a number`, given);
  try {
    cooldownLimit(maxAttempts, secondsToMs(decaySeconds));
  } catch (e) {
    if (!(e instanceof InvalidLimitError)) throw e;
    throw e.field === 'uses' ? invalidLimit('uses', 'maxAttempts', maxAttempts) : invalidLimit('windowMs', argument, given, DECAY_RANGE);
  }
}

/** `new Limit('', maxAttempts, unit * decay)`, a refused decay named `argument` with the value given. */
function scaled(maxAttempts: number, decay: number, unit: number, argument: string): Limit {
  if (typeof decay !== 'number') throw typeError(`${argument} must be a number`, decay);
  checkLimit(maxAttempts, unit * decay, argument, decay);
  return new Limit('', maxAttempts, unit * decay);
}

/**
 * Seconds to milliseconds, exact where the product is a whole number up to float noise (so `1.005`
 * seconds is 1005 ms, not 1004.9999999999999); anything else is left for the engine to refuse.
 * @internal
 */
export function secondsToMs(seconds: number): number {
  const ms = seconds * 1000;
  const whole = Math.round(ms);
  return Math.abs(ms - whole) <= 1e-6 * Math.max(1, Math.abs(whole)) ? whole : ms;
}
