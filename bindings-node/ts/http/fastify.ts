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

import { Guard, TOO_MANY_REQUESTS, type LimitSource, type Outcome, type Refusal, type ThrottleOptions } from './guard';

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
  const guard = new Guard(source, options, true);
  return async (request: FastifyRequestLike, reply: FastifyReplyLike) => {
    const outcome = await check(guard, request, reply);
    if (outcome.allowed) {
      allow(reply, outcome.finish);
      return undefined;
    }
    return refuse(request, reply, outcome.refusal);
  };
}

/** Counts `request` with `guard`, setting the fields on `reply`. */
function check(guard: Guard, request: FastifyRequestLike, reply: FastifyReplyLike): Outcome | Promise<Outcome> {
  return guard.check(
    request,
    request.raw.socket.remoteAddress,
    (name) => join(request.headers[name]),
    (name, value) => reply.header(name, value),
  );
}

/** An allowed request: its `after()` hooks once the response is finished. */
function allow(reply: FastifyReplyLike, finish: ((response: unknown) => Promise<void>) | undefined): void {
  if (finish !== undefined) reply.raw.once('finish', () => void finish(reply));
}

/** Answers a refusal: the limit's `response()` callback, or 429 and a short text. Resolves to `reply`. */
async function refuse(request: FastifyRequestLike, reply: FastifyReplyLike, refusal: Refusal): Promise<FastifyReplyLike> {
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
}

/**
 * The plugin's hook: {@link throttle}'s in Fastify's callback style (`done`), so an allowed request
 * costs no async frame nor the promise Fastify would wait on besides the store's own (a `MemoryStore`:
 * none at all). A refusal is sent and `done` not called (Fastify stops there); an error goes to
 * `done(error)`, Fastify's error handler.
 */
function pluginHook(guard: Guard): (request: FastifyRequestLike, reply: FastifyReplyLike, done: (error?: unknown) => void) => void {
  return (request, reply, done) => {
    let outcome: Outcome | Promise<Outcome>;
    try {
      outcome = check(guard, request, reply);
    } catch (e) {
      done(e);
      return;
    }
    if (outcome instanceof Promise) outcome.then((got) => settle(request, reply, done, got), done);
    else settle(request, reply, done, outcome);
  };
}

/** {@link pluginHook} once the outcome is known. */
function settle(request: FastifyRequestLike, reply: FastifyReplyLike, done: (error?: unknown) => void, outcome: Outcome): void {
  if (outcome.allowed) {
    allow(reply, outcome.finish);
    done();
    return;
  }
  refuse(request, reply, outcome.refusal).catch(done);
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
  if (global !== undefined) new Guard(global, throttleOptions);
  fastify.addHook('onRoute', (route) => {
    const own = route.config?.throttle;
    const source = own === undefined ? global : own;
    if (source === undefined || source === false) return;
    const guard = pluginHook(new Guard(source, throttleOptions, true));
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
