// The ESM entry point of `ratewindow/express` (see esm/index.mjs for why it wraps the CommonJS build).
import { createRequire } from 'node:module';

const cjs = createRequire(import.meta.url)('../dist/http/express.js');

export const { throttle, HttpInputError } = cjs;
