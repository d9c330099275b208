// The conformance kit, run as a user runs it: on MemoryStore, on a user's own correct store, and on one
// that implements `consume` alone.
import { describe, it } from 'node:test';

import { testStore } from '../dist/testing.js';
import { api } from './backend.mjs';
import { ConsumeOnlyStore, LogStore } from './stores.mjs';

testStore('MemoryStore', () => new api.MemoryStore(), { describe, it });
testStore('LogStore (a correct store in plain JavaScript)', () => new LogStore(), { describe, it });
testStore('ConsumeOnlyStore (the default consumeMany and peekMany)', () => new ConsumeOnlyStore(), { describe, it });
