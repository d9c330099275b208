// Runs every tests/vectors/*.json case through the TypeScript layer and the backend, with a manual
// clock, and compares every field (null included) with the expected values.
import { api } from './backend.mjs';
import { vectorSuite } from './vector-runner.mjs';

vectorSuite('conformance vectors', api, (clock) => ({ store: new api.MemoryStore({ clock }) }));
