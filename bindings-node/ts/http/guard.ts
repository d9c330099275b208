/**
 * What every HTTP middleware of ratewindow shares, framework-free: resolve a request's limits, count
 * them in one batch call, and say what to answer. The decisions (store keys, the batch, the response
 * fields, the client address) are the core's (`ratewindow_core::http`, through the addon); this file
 * drives them and calls the user's hooks.
 * @module
 * @internal
 */
import { typeError } from '../errors';
import { Limit } from '../limit';
import { RateLimiter } from '../rate-limiter';
import type { CooldownStore } from '../store';
import type { Awaitable, BatchVerdict } from '../types';
import { ClientAddress, fieldNames, headers, IETF, LEGACY, plan, type Plan, type TrustOptions } from './native';

/** What a request's limits come from: a registered limiter's name, a limit (or several), or a callback. */
export type LimitSource = string | Limit | readonly Limit[] | LimitCallback;

/** Returns a request's limits (none: `[]`, or `Limit.none()`). */
export type LimitCallback = (request: any, info: RequestInfo) => Limit | readonly Limit[] | Promise<Limit | readonly Limit[]>;

/** What the middleware passes a limiter's callback after the request. */
export interface RequestInfo {
  /**
   * The client's address: the peer's, or the one the trusted proxies forwarded when `trustProxy` is
   * set (IPv4-mapped IPv6 as IPv4, IPv6 normalised). Worked out on first read.
   */
  readonly ip: string;
}

/** Which rate-limit fields to send besides `Retry-After`. */
export interface HeaderOptions {
  /** `RateLimit-Policy` and `RateLimit` (draft-ietf-httpapi-ratelimit-headers). Default true. */
  readonly ietf?: boolean;
  /** `X-RateLimit-Limit`, `X-RateLimit-Remaining`, `X-RateLimit-Reset` (Unix seconds). Default false. */
  readonly legacy?: boolean;
}

/** Options every middleware takes. */
export interface ThrottleOptions extends TrustOptions {
  /** Where named limiters are registered (`limiter.for(name, callback)`). Required for a name. */
  readonly limiter?: RateLimiter;
  /**
   * The store counting requests (sliding windows: one `consumeMany` per request). Default:
   * `limiter.store` (a `MemoryStore`, `RedisStore` ... is a cooldown store too).
   */
  readonly store?: CooldownStore;
  /**
   * The limiter name of keys and policies when the limits are given directly (a `Limit` or a
   * callback): keys are `throttle:{name}:{key}`. Default `default`. Ignored for a named limiter.
   */
  readonly name?: string;
  /** The fields sent on every counted response, allowed or refused (`false`: `Retry-After` alone). Default `{ ietf: true }`. */
  readonly headers?: HeaderOptions | boolean;
  /** Receives an error thrown by an `after()` hook or by giving a hit back (default: `process.emitWarning`). */
  readonly onAfterError?: (error: unknown) => void;
}

/** What a limit's `response()` callback receives last: why the request was refused. */
export interface Refusal {
  /** The limit that refused (the batch's blocked entry's). */
  readonly limit: Limit;
  /** The store's verdict. */
  readonly verdict: BatchVerdict;
  /** The fields set on the response (`Retry-After` first), as `[name, value]` pairs. */
  readonly headers: readonly (readonly [string, string])[];
}

/** The outcome of {@link Guard.check}. */
export type Outcome =
  | { readonly allowed: true; readonly finish: ((response: unknown) => Promise<void>) | undefined }
  | { readonly allowed: false; readonly refusal: Refusal };

const PASS: Outcome = Object.freeze({ allowed: true, finish: undefined });
const NONE: readonly Limit[] = Object.freeze([]);

/** The {@link RequestInfo} of one request: the client address, worked out on first read. */
class Info implements RequestInfo {
  private address: string | undefined;

  constructor(
    private readonly trust: ClientAddress,
    private readonly peer: string | undefined,
    private readonly header: (name: string) => string | undefined,
  ) {}

  get ip(): string {
    if (this.address === undefined) {
      const name = this.trust.header;
      this.address = this.trust.of(this.peer, name === null ? undefined : this.header(name));
    }
    return this.address;
  }
}

function isPromise<T>(value: T | PromiseLike<T>): value is PromiseLike<T> {
  return typeof (value as PromiseLike<T> | null)?.then === 'function';
}

/** A callback's answer as a list. */
function asList(got: Limit | readonly Limit[] | undefined | null): readonly Limit[] {
  return got === undefined || got === null ? NONE : got instanceof Limit ? [got] : got;
}

/** The default body of a refusal (with status 429). */
export const TOO_MANY_REQUESTS = 'Too Many Requests';

/** The engine of Express's `throttle()` and Fastify's hook. @internal */
export class Guard {
  private readonly name: string;
  private readonly source: LimitSource;
  private readonly limiter: RateLimiter | undefined;
  private readonly store: CooldownStore;
  private readonly flags: number;
  private readonly address: ClientAddress;
  private readonly onAfterError: (error: unknown) => void;
  /** The field names `setHeader` gets (lower case for Fastify, which stores them so). */
  private readonly names: readonly string[];

  /** `lowerCaseNames`: set the fields by their lower-case names (a refusal's `headers` keep the core's). */
  constructor(source: LimitSource, options: ThrottleOptions = {}, lowerCaseNames = false) {
    if (typeof options !== 'object' || options === null) throw typeError('options must be an object', options);
    const { limiter, headers: fields = true, onAfterError, name = 'default' } = options;
    if (limiter !== undefined && !(limiter instanceof RateLimiter)) throw typeError('limiter must be a RateLimiter', limiter);
    if (typeof source === 'string') {
      if (limiter === undefined) throw new TypeError(`throttle('${source}'): a named limiter needs options.limiter`);
    } else if (!(source instanceof Limit) && !Array.isArray(source) && typeof source !== 'function') {
      throw typeError('throttle() takes a limiter name, a Limit, an array of them or a callback', source);
    }
    if (typeof name !== 'string') throw typeError('name must be a string', name);
    const store = options.store ?? (limiter?.store as CooldownStore | undefined);
    if (typeof (store as { consumeMany?: unknown } | undefined)?.consumeMany !== 'function') {
      throw typeError('options.store must be a cooldown store (with consumeMany), or the limiter\'s store one', store);
    }
    if (onAfterError !== undefined && typeof onAfterError !== 'function') throw typeError('onAfterError must be a function', onAfterError);
    const h = typeof fields === 'boolean' ? { ietf: fields, legacy: false } : fields;
    this.source = source;
    this.limiter = limiter;
    this.store = store!;
    this.name = typeof source === 'string' ? source : name;
    this.flags = ((h.ietf ?? true) ? IETF : 0) | (h.legacy ? LEGACY : 0);
    this.address = new ClientAddress(options);
    this.onAfterError = onAfterError ?? ((e) => process.emitWarning(e instanceof Error ? e : String(e)));
    // A bad name fails here, not at the first request.
    plan(this.name, NONE);
    this.names = fieldNames(lowerCaseNames);
  }

  /** The limits of `request`: the named limiter's (its keys deduplicated by the core), or the given ones. */
  private limits(request: unknown, info: RequestInfo): readonly Limit[] | Promise<readonly Limit[]> {
    const source = this.source;
    let callback: LimitCallback;
    if (typeof source === 'string') {
      // The callback itself, not `limiter.limiter()`: the core rewrites keys two limits share.
      const registered = this.limiter!.callback(source);
      if (registered === undefined) throw new TypeError(`throttle('${source}'): no limiter named '${source}' is registered`);
      callback = registered;
    } else if (typeof source === 'function') {
      callback = source;
    } else {
      return source instanceof Limit ? [source] : (source as readonly Limit[]);
    }
    const got = callback(request, info);
    return typeof (got as Promise<unknown>)?.then === 'function' ? (got as Promise<Limit | readonly Limit[]>).then(asList) : asList(got as Limit | readonly Limit[]);
  }

  /**
   * Counts `request` against its limits and sets the response fields with `setHeader`. `peer` is the
   * socket's remote address; `header(name)` reads a request header (lower-case name, several lines
   * joined by `, `). Answers at once, without a promise, when nothing it calls answers with one (a
   * `MemoryStore` and a synchronous callback): the middleware then goes on in the same tick. A
   * synchronous error (a bad key, a callback that throws) is thrown; an asynchronous one rejects.
   */
  check(
    request: unknown,
    peer: string | undefined,
    header: (name: string) => string | undefined,
    setHeader: (name: string, value: string) => void,
  ): Outcome | Promise<Outcome> {
    const limits = this.limits(request, new Info(this.address, peer, header));
    if (isPromise(limits)) return Promise.resolve(limits).then((got) => this.count(got, setHeader));
    return this.count(limits, setHeader);
  }

  /** {@link check} once the limits are known: one store call. */
  private count(limits: readonly Limit[], setHeader: (name: string, value: string) => void): Outcome | Promise<Outcome> {
    if (limits.length === 0) return PASS;
    const p = plan(this.name, limits);
    if (p === undefined) return PASS; // every limit unlimited: not counted
    let hooks = false;
    for (const i of p.sources) hooks ||= limits[i]!.afterCallback !== undefined;
    // One entry and nothing to give back: `consume` is the same call as a batch of one, without the
    // batch's release handle.
    const entry = p.entries[0]!;
    const verdict: Awaitable<BatchVerdict> =
      p.entries.length === 1 && !hooks ? this.store.consume(entry.key, entry.limit) : this.store.consumeMany(p.entries);
    if (isPromise(verdict)) return Promise.resolve(verdict).then((got) => this.decide(p, limits, hooks, got, setHeader));
    return this.decide(p, limits, hooks, verdict, setHeader);
  }

  /** {@link check} once the store answered: the fields, and what to do. */
  private decide(
    p: Plan,
    limits: readonly Limit[],
    hooks: boolean,
    verdict: BatchVerdict,
    setHeader: (name: string, value: string) => void,
  ): Outcome {
    const names = this.names;
    if (verdict.allowed) {
      headers(this.name, p, verdict, this.flags, (field, value) => setHeader(names[field]!, value));
      return hooks ? { allowed: true, finish: (response) => this.after(p, limits, verdict, response) } : PASS;
    }
    const pairs: [string, string][] = [];
    const canonical = fieldNames();
    headers(this.name, p, verdict, this.flags, (field, value) => {
      setHeader(names[field]!, value);
      pairs.push([canonical[field]!, value]);
    });
    const limit = limits[p.sources[verdict.blocked ?? 0]!]!;
    return { allowed: false, refusal: Object.freeze({ limit, verdict, headers: pairs }) };
  }

  /**
   * Runs the `after()` hooks with the finished response. When one answers falsy, the request's hit is
   * given back (`release()`, the whole batch) and the entries whose limits still count it are counted
   * again in one batch: the request then counts only against those.
   */
  private async after(p: Plan, limits: readonly Limit[], verdict: BatchVerdict, response: unknown): Promise<void> {
    try {
      const keep = [];
      for (let i = 0; i < p.entries.length; i++) {
        const callback = limits[p.sources[i]!]!.afterCallback;
        if (callback === undefined || (await callback(response))) keep.push(p.entries[i]!);
      }
      if (keep.length === p.entries.length) return;
      if (verdict.release === undefined) throw new TypeError('after(): the store gives no release() on its verdicts, so a hit cannot be given back');
      await verdict.release();
      if (keep.length > 0) await this.store.consumeMany(keep);
    } catch (e) {
      this.onAfterError(e);
    }
  }
}
