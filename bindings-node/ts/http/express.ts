/**
 * `ratewindow/express`: the `throttle()` middleware for Express 4 and 5, plain `node:http` and any
 * `(req, res, next)` framework (Connect, Polka ...).
 *
 * ```ts
 * import express from 'express';
 * import { Limit, MemoryStore, RateLimiter } from 'ratewindow';
 * import { throttle } from 'ratewindow/express';
 *
 * const limiter = new RateLimiter(new MemoryStore());
 * limiter.for('login', (req, { ip }) => Limit.perMinute(5).by(`${req.body.email}|${ip}`));
 * app.post('/login', express.json(), throttle('login', { limiter }), login);
 * ```
 *
 * Each request is counted against all its limits in one batch call (all or nothing); a refused one
 * gets 429 with `Retry-After` (or the limit's `response()`), every limited one the `RateLimit-Policy`
 * / `RateLimit` fields (and `X-RateLimit-*` with `headers: { legacy: true }`). A store failure is
 * passed to `next(error)`, the framework's error handling.
 * @module
 */
import type { IncomingMessage, ServerResponse } from 'node:http';

import { Guard, TOO_MANY_REQUESTS, type LimitSource, type Outcome, type Refusal, type ThrottleOptions } from './guard';

export { HttpInputError } from './native';
export type { HeaderOptions, LimitCallback, LimitSource, Refusal, RequestInfo, ThrottleOptions } from './guard';
export type { TrustOptions } from './native';

/** A `(req, res, next)` middleware. */
export type Middleware = (req: IncomingMessage, res: ServerResponse, next: (error?: unknown) => void) => void;

/**
 * The middleware guarding a route with `source`: a registered limiter's name (`options.limiter`), a
 * {@link Limit} or several, or a callback `(req, { ip }) => limits`.
 *
 * A limit's `response((req, res, refusal) => ...)` answers a refusal instead of the default: it may
 * send the response itself, or return a body, sent with status 429. A limit's `after((res) => bool)`
 * runs once the response is finished: a falsy answer gives the request's hit back.
 */
export function throttle(source: LimitSource, options: ThrottleOptions = {}): Middleware {
  const guard = new Guard(source, options);
  return (req, res, next) => {
    let outcome: Outcome | Promise<Outcome>;
    try {
      outcome = guard.check(
        req,
        req.socket.remoteAddress,
        (name) => headerOf(req, name),
        (name, value) => res.setHeader(name, value),
      );
    } catch (e) {
      next(e);
      return;
    }
    // A MemoryStore answers at once: the request goes on in this tick, no promise in between.
    if (outcome instanceof Promise) outcome.then((got) => settle(req, res, next, got), next);
    else settle(req, res, next, outcome);
  };
}

/** Goes on with an allowed request (its `after()` hooks once the response is finished), or refuses it. */
function settle(req: IncomingMessage, res: ServerResponse, next: (error?: unknown) => void, outcome: Outcome): void {
  if (outcome.allowed) {
    const finish = outcome.finish;
    if (finish !== undefined) res.once('finish', () => void finish(res));
    next();
    return;
  }
  refuse(req, res, outcome.refusal).catch(next);
}

/** Answers a refusal: the limit's `response()` callback, or 429 and a short text. */
async function refuse(req: IncomingMessage, res: ServerResponse, refusal: Refusal): Promise<void> {
  const callback = refusal.limit.responseCallback;
  let body: unknown = TOO_MANY_REQUESTS;
  if (callback !== undefined) {
    body = await callback(req, res, refusal);
    if (res.headersSent || res.writableEnded) return;
  }
  if (!res.headersSent) res.statusCode = 429;
  const send = (res as { send?: (body: unknown) => void }).send;
  if (typeof send === 'function') {
    // Express: its send() picks the content type (a string as HTML, an object as JSON).
    if (body === TOO_MANY_REQUESTS && !res.hasHeader('content-type')) res.setHeader('Content-Type', 'text/plain; charset=utf-8');
    send.call(res, body);
    return;
  }
  if (body === undefined || body === null) {
    res.end();
  } else if (typeof body === 'string' || body instanceof Uint8Array) {
    if (!res.hasHeader('content-type')) res.setHeader('Content-Type', 'text/plain; charset=utf-8');
    res.end(body);
  } else {
    res.setHeader('Content-Type', 'application/json; charset=utf-8');
    res.end(JSON.stringify(body));
  }
}

function headerOf(req: IncomingMessage, name: string): string | undefined {
  const value = req.headers[name];
  return Array.isArray(value) ? value.join(', ') : value;
}
