/**
 * `ratewindow/fastify`: rate limiting for Fastify 4 and 5 (both tested), as a plugin (limits per route in its
 * `config`) or as a hook on one route.
 *
 * ```ts
 * import Fastify from 'fastify';
 * import { Limit, MemoryStore, RateLimiter } from 'ratewindow';
 * import { ratewindow, throttle } from 'ratewindow/fastify';
 *
 * const limiter = new RateLimiter(new MemoryStore());
 * limiter.for('api', (req, { ip }) => Limit.perMinute(60).by(req.user?.id ?? ip));
 * const app = Fastify();
 * await app.register(ratewindow, { limiter, global: 'api' });  // before the routes
 * app.get('/search', { config: { throttle: Limit.perSecond(2) } }, search);  // its own limit
 * app.get('/health', { config: { throttle: false } }, health);               // none
 * // or, without the plugin, on one route:
 * app.post('/login', { onRequest: throttle('login', { limiter }) }, login);
 * ```
 *
 * Refused requests get 429 with `Retry-After` (or the limit's `response()`), every limited one the
 * `RateLimit-Policy` / `RateLimit` fields. A store failure is thrown from the hook: Fastify's error
 * handler answers it.
 * @module
 */
import type { IncomingMessage, ServerResponse } from 'node:http';

import { Guard, TOO_MANY_REQUESTS, type LimitSource, type ThrottleOptions } from './guard';

export { HttpInputError } from './native';
export type { HeaderOptions, LimitCallback, LimitSource, Refusal, RequestInfo, ThrottleOptions } from './guard';
export type { TrustOptions } from './native';

/** The parts of a Fastify request the hook reads. */
export interface FastifyRequestLike {
  readonly headers: Record<string, string | string[] | undefined>;
  readonly raw: IncomingMessage;
}

/** The parts of a Fastify reply the hook uses. */
export interface FastifyReplyLike {
  readonly raw: ServerResponse;
  readonly sent: boolean;
  code(status: number): unknown;
  header(name: string, value: string): unknown;
  send(body?: unknown): unknown;
}

/** An `onRequest` / `preHandler` hook. */
export type ThrottleHook = (request: any, reply: any) => Promise<unknown>;

/**
 * A hook guarding one route with `source` (a registered limiter's name, a `Limit` or several, or a
 * callback `(request, { ip }) => limits`): `{ onRequest: throttle(...) }`, or `preHandler` when the
 * limits read the parsed body.
 */
export function throttle(source: LimitSource, options: ThrottleOptions = {}): ThrottleHook {
  const guard = new Guard(source, options);
  return async (request: FastifyRequestLike, reply: FastifyReplyLike) => {
    const outcome = await guard.check(
      request,
      request.raw.socket.remoteAddress,
      (name) => join(request.headers[name]),
      (name, value) => reply.header(name, value),
    );
    if (outcome.allowed) {
      const finish = outcome.finish;
      if (finish !== undefined) reply.raw.once('finish', () => void finish(reply));
      return undefined;
    }
    const { refusal } = outcome;
    reply.code(429);
    let body: unknown = TOO_MANY_REQUESTS;
    const callback = refusal.limit.responseCallback;
    if (callback !== undefined) {
      body = await callback(request, reply, refusal);
      if (reply.sent) return reply;
    }
    if (body === TOO_MANY_REQUESTS) reply.header('Content-Type', 'text/plain; charset=utf-8');
    reply.send(body);
    return reply;
  };
}

/** Options of the {@link ratewindow} plugin. */
export interface RatewindowPluginOptions extends ThrottleOptions {
  /** The limits of every route that names none in `config.throttle`. Default: none. */
  readonly global?: LimitSource;
  /** The hook the check runs in: `onRequest` (default, before the body is read) or `preHandler`. */
  readonly hook?: 'onRequest' | 'preHandler';
}

/** The route options the plugin reads. */
interface RouteOptionsLike {
  config?: { throttle?: LimitSource | false };
  onRequest?: unknown;
  preHandler?: unknown;
}

/** The part of a Fastify instance the plugin uses. */
interface FastifyLike {
  addHook(name: 'onRoute', hook: (route: RouteOptionsLike) => void): unknown;
}

/**
 * The Fastify plugin (registered as `fastify-plugin` would: not encapsulated, so it sees every route
 * registered after it). A route's `config.throttle` names its limits (`false`: none); routes without
 * one get `options.global`.
 */
export function ratewindow(fastify: FastifyLike, options: RatewindowPluginOptions, done: (error?: Error) => void): void {
  const { global, hook = 'onRequest', ...throttleOptions } = options ?? {};
  if (hook !== 'onRequest' && hook !== 'preHandler') {
    done(new TypeError(`ratewindow: hook must be 'onRequest' or 'preHandler' (got ${String(hook)})`));
    return;
  }
  // Checked now, so a misconfiguration fails at registration and not at the first route.
  if (global !== undefined) throttle(global, throttleOptions);
  fastify.addHook('onRoute', (route) => {
    const own = route.config?.throttle;
    const source = own === undefined ? global : own;
    if (source === undefined || source === false) return;
    const guard = throttle(source, throttleOptions);
    const existing = route[hook];
    // First, so that a refused request runs none of the route's own hooks.
    route[hook] = existing === undefined ? [guard] : [guard, ...(Array.isArray(existing) ? existing : [existing])];
  });
  done();
}
// What fastify-plugin sets: no encapsulation, a name for errors, the Fastify versions supported.
Object.assign(ratewindow, {
  [Symbol.for('skip-override')]: true,
  [Symbol.for('fastify.display-name')]: 'ratewindow',
  [Symbol.for('plugin-meta')]: { name: 'ratewindow', fastify: '4.x || 5.x' },
});

function join(value: string | string[] | undefined): string | undefined {
  return Array.isArray(value) ? value.join(', ') : value;
}
