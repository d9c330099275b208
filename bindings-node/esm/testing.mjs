// The ESM entry point of `ratewindow/testing` (see esm/index.mjs for why it wraps the CommonJS build).
import { createRequire } from 'node:module';

const cjs = createRequire(import.meta.url)('../dist/testing.js');

export const { testStore } = cjs;
