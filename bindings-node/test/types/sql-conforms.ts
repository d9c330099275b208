// A compile-time proof that the napi addon implements the optional SQL boundary: the types napi-rs
// generates from src/call.rs (native.d.ts) must be assignable to the interfaces of ts/sql-backend.ts.
import type { BackendCalls } from '../../ts/redis-backend';
import type { SqlBackend } from '../../ts/sql-backend';
import type * as Native from '../../native';

declare const native: typeof Native;

export const postgres: BackendCalls = native.NativeCalls.postgres(new Float64Array(64), 'ratewindow');
export const sqlite: BackendCalls = native.NativeCalls.sqlite(new Float64Array(64), 'ratewindow');
export const sql: SqlBackend = {
  createPostgres: (record: Float64Array, prefix: string, durable?: boolean) => native.NativeCalls.postgres(record, prefix, durable),
  createSqlite: (record: Float64Array, prefix: string) => native.NativeCalls.sqlite(record, prefix),
};
