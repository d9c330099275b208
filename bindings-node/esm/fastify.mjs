// The ESM entry point of `ratewindow/fastify` (see esm/index.mjs for why it wraps the CommonJS build).
import { createRequire } from 'node:module';

const cjs = createRequire(import.meta.url)('../dist/http/fastify.js');

export const { ratewindow, throttle, HttpInputError } = cjs;
export default ratewindow;
