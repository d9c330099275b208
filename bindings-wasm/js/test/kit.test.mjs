// The conformance kit as a user of @ratewindow/wasm runs it: from the package's own `testing` entry,
// on the package's own MemoryStore (the Node suite runs the Node package's copy of the kit; this runs
// the copy compiled into this package).
import { describe, it } from 'node:test';

import { MemoryStore } from '@ratewindow/wasm';
import { testStore } from '@ratewindow/wasm/testing';

testStore('@ratewindow/wasm MemoryStore', () => new MemoryStore(), { describe, it });
