// The conversation vectors (tests/vectors/conversations/*.json) through the Node package's public
// stores on the napi addon's call machines (the runner: conversation-runner.mjs, which
// @ratewindow/wasm runs too).
import { createRequire } from 'node:module';

import { conversationSuite } from './conversation-runner.mjs';

const require = createRequire(import.meta.url);
conversationSuite(require('../dist/index.js'), require('../dist/api.js').nativeBackend());
