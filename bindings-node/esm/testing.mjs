// The ESM entry point of `ratewindow/testing` (see esm/index.mjs for why it wraps the CommonJS build).
import cjs from '../dist/testing.js';

export const { testStore } = cjs;
