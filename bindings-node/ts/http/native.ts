/**
 * The addon's HTTP functions (`src/http.rs`, over `ratewindow_core::http`), in the shapes the
 * middleware uses. Every decision is the core's: store keys, which limits count, the response fields,
 * the client address. This file converts and maps errors.
 * @module
 * @internal
 */
import { join } from 'node:path';

import { fromBackend, RateWindowError, typeError } from '../errors';
import { Limit, Unlimited } from '../limit';
import type { BatchVerdict, CooldownLimit, Entry } from '../types';

/** The addon's HTTP exports. */
interface NativeHttp {
  httpEntries(name: string, keys: (string | null)[], uses: number[], windowMs: number[]): { keys: string[]; sources: number[] };
  httpEntry(name: string, key: string, uses: number, windowMs: number): string;
  httpHeaders1(
    name: string,
    uses: number,
    windowMs: number,
    allowed: boolean,
    retryAfterMs: number,
    limit: number,
    remaining: number,
    refillAfterMs: number,
    resetAfterMs: number,
    nowMs: number,
    flags: number,
  ): string;
  httpHeaders(
    name: string,
    uses: number[],
    windowMs: number[],
    allowed: boolean,
    retryAfterMs: number,
    blocked: number,
    limit: number,
    remaining: number,
    refillAfterMs: number,
    resetAfterMs: number,
    nowMs: number,
    flags: number,
  ): string[];
  httpFieldNames(): string[];
  httpErrorStatus(kind: string): number;
  HttpTrust: new (hops: number | null, proxies: string[] | null, header: string | null, ipv6Prefix: number | null) => NativeTrust;
}

/** `HttpTrust` of the addon. */
interface NativeTrust {
  /** The header to read (`x-forwarded-for` / `forwarded`), or null: the peer alone. */
  readonly header: string | null;
  clientAddress(peer: string, forwarded: string | null): string;
}

/**
 * A request the HTTP layer cannot key (a key longer than the core's 1024 bytes, no peer address — a Unix
 * socket — and no trusted proxy that forwarded one) or a configuration it cannot hold (an invalid limiter name, trusted proxy or IPv6
 * prefix). `reason` is the core's name for it; `statusCode` the status to answer with (400 for a key
 * too long: the request carried it; 500 otherwise), which Express's and Fastify's error handlers read.
 */
export class HttpInputError extends RateWindowError {
  /** The core's name: `key_too_long`, `invalid_name`, `no_peer`, `invalid_proxy`, `invalid_prefix`. */
  readonly reason: string;
  /** The status to answer the request with. */
  readonly statusCode: number;

  constructor(reason: string, message: string, statusCode: number) {
    super('ERR_RATEWINDOW_INVALID_ARGUMENT', message);
    this.reason = reason;
    this.statusCode = statusCode;
  }
}

let loaded: NativeHttp | undefined;

function native(): NativeHttp {
  // eslint-disable-next-line @typescript-eslint/no-require-imports
  return (loaded ??= require(join(__dirname, '..', '..', 'loader.cjs')) as NativeHttp);
}

/** An addon error as a ratewindow error. */
function mapped(e: unknown): Error {
  const code = (e as { code?: unknown } | null)?.code;
  if (typeof code === 'string' && code.startsWith('http:')) {
    const reason = code.slice(5);
    return new HttpInputError(reason, (e as Error).message, native().httpErrorStatus(reason));
  }
  // This module's own arguments (a key that is not valid Unicode is the addon's `invalid_argument:key`).
  if (code === 'invalid_argument:trustProxy' || code === 'invalid_argument:proxyHeader' || code === 'invalid_argument:limits') {
    return new TypeError((e as Error).message);
  }
  return fromBackend(e);
}

/** Options of the client address. */
export interface TrustOptions {
  /**
   * Whom to believe about the client address: how many reverse proxies are in front of the app (the
   * client is that many addresses back in the forwarded header), or the addresses / CIDR blocks of the
   * trusted proxies. Default: no header is believed, the client is the peer.
   */
  readonly trustProxy?: number | readonly string[];
  /** The header the trusted proxies write: `x-forwarded-for` (default) or RFC 7239 `forwarded`. */
  readonly proxyHeader?: 'x-forwarded-for' | 'forwarded';
  /** Answer an IPv6 client by its block of this prefix (e.g. 64: `2001:db8:1:2::/64`). Default 128. */
  readonly ipv6Prefix?: number;
}

/** The client address of requests, as configured. */
export class ClientAddress {
  private readonly trust: NativeTrust;
  /** The header read, or null. */
  readonly header: string | null;

  constructor(options: TrustOptions) {
    const { trustProxy, proxyHeader, ipv6Prefix } = options;
    let hops: number | null = null;
    let proxies: string[] | null = null;
    if (typeof trustProxy === 'number') hops = trustProxy;
    else if (Array.isArray(trustProxy)) {
      proxies = trustProxy.map((p) => {
        if (typeof p !== 'string') throw typeError('trustProxy must list addresses as strings', p);
        return p;
      });
    } else if (trustProxy !== undefined) throw typeError('trustProxy must be a number of hops or a list of addresses', trustProxy);
    if (proxyHeader !== undefined && typeof proxyHeader !== 'string') throw typeError('proxyHeader must be a string', proxyHeader);
    if (ipv6Prefix !== undefined && typeof ipv6Prefix !== 'number') throw typeError('ipv6Prefix must be a number', ipv6Prefix);
    try {
      this.trust = new (native().HttpTrust)(hops, proxies, proxyHeader ?? null, ipv6Prefix ?? null);
    } catch (e) {
      throw mapped(e);
    }
    this.header = this.trust.header;
  }

  /** The client's address from the peer and the header (`value` of {@link header}). */
  of(peer: string | undefined, value: string | undefined): string {
    try {
      return this.trust.clientAddress(peer ?? '', value ?? null);
    } catch (e) {
      throw mapped(e);
    }
  }
}

/** What one request counts: its entries and, for each, the limit it is from. */
export interface Plan {
  /** The entries of the one `consumeMany`; each entry's `limit` is the request's `Limit` it counts. */
  readonly entries: Entry[];
  /** `sources[i]`: the index among the request's limits of the limit `entries[i]` counts against. */
  readonly sources: readonly number[];
}

const FIRST: readonly number[] = Object.freeze([0]);

/**
 * The entries of a request to the limiter `name` with `limits` (`Unlimited` ones skipped by the
 * core); undefined when none counts.
 */
export function plan(name: string, limits: readonly Limit[]): Plan | undefined {
  const n = limits.length;
  const first = limits[0];
  if (n === 1 && first instanceof Limit && !(first instanceof Unlimited)) {
    // The common request, one limit: its store key alone crosses back.
    let key: string;
    try {
      key = native().httpEntry(name, first.key, first.maxAttempts, first.windowMs);
    } catch (e) {
      throw mapped(e);
    }
    return { entries: [{ key, limit: first }], sources: FIRST };
  }
  const keys: (string | null)[] = new Array(n);
  const uses: number[] = new Array(n);
  const windows: number[] = new Array(n);
  for (let i = 0; i < n; i++) {
    const limit = limits[i];
    if (!(limit instanceof Limit)) throw typeError(`the limiter '${name}' returned something that is not a Limit`, limit);
    const unlimited = limit instanceof Unlimited;
    keys[i] = unlimited ? null : limit.key;
    uses[i] = unlimited ? 1 : limit.maxAttempts;
    windows[i] = unlimited ? 1 : limit.windowMs;
  }
  let got: { keys: string[]; sources: number[] };
  try {
    got = native().httpEntries(name, keys, uses, windows);
  } catch (e) {
    throw mapped(e);
  }
  const m = got.keys.length;
  if (m === 0) return undefined;
  const entries: Entry[] = new Array(m);
  for (let i = 0; i < m; i++) entries[i] = { key: got.keys[i]!, limit: limits[got.sources[i]!]! };
  return { entries, sources: got.sources };
}

/** Header flags: the IETF fields, the legacy ones. */
export const IETF = 1;
export const LEGACY = 2;

let names: readonly string[] | undefined;
let lowerNames: readonly string[] | undefined;

/**
 * The response fields' names as the core spells them (`Retry-After`, `RateLimit-Policy` ...), indexed
 * as {@link headers} numbers them; with `lower`, in lower case (what Fastify and Node store them by:
 * the same strings every request, so no name is made nor looked up as a new property key).
 */
export function fieldNames(lower = false): readonly string[] {
  const canonical = (names ??= Object.freeze(native().httpFieldNames()));
  return lower ? (lowerNames ??= Object.freeze(canonical.map((n) => n.toLowerCase()))) : canonical;
}

/** The limits of a plan's entries, as the core reads them: `uses` and `windowMs`. */
export interface EntryLimits {
  readonly entries: readonly { readonly limit: CooldownLimit }[];
}

/**
 * Sets the response fields of `verdict` for the entries of `plan` with `set(field, value)`, in the
 * core's order, `field` the index of the field's name in {@link fieldNames}; `nowMs` is when (for
 * `X-RateLimit-Reset`).
 */
export function headers(name: string, plan: EntryLimits, verdict: BatchVerdict, flags: number, set: (field: number, value: string) => void, nowMs = Date.now()): void {
  const entries = plan.entries;
  try {
    if (entries.length === 1) {
      // One entry: the fields come back as one string of lines, each the field's index (one digit)
      // then its value.
      const { uses, windowMs } = entries[0]!.limit;
      const lines = native().httpHeaders1(
        name,
        uses,
        windowMs,
        verdict.allowed,
        verdict.retryAfterMs,
        verdict.limit ?? 0,
        verdict.remaining ?? 0,
        verdict.refillAfterMs ?? 0,
        verdict.resetAfterMs ?? 0,
        nowMs,
        flags,
      );
      let at = 0;
      while (at < lines.length) {
        let end = lines.indexOf('\n', at);
        if (end === -1) end = lines.length;
        set(lines.charCodeAt(at) - 48, lines.slice(at + 1, end));
        at = end + 1;
      }
      return;
    }
    const flat = native().httpHeaders(
      name,
      entries.map((e) => e.limit.uses),
      entries.map((e) => e.limit.windowMs),
      verdict.allowed,
      verdict.retryAfterMs,
      verdict.blocked ?? -1,
      verdict.limit ?? 0,
      verdict.remaining ?? 0,
      verdict.refillAfterMs ?? 0,
      verdict.resetAfterMs ?? 0,
      nowMs,
      flags,
    );
    const names = fieldNames();
    for (let i = 0; i < flat.length; i += 2) set(names.indexOf(flat[i]!), flat[i + 1]!);
  } catch (e) {
    throw mapped(e);
  }
}
