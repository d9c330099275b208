// A compile-time proof that the napi addon implements the optional SQL boundary: the types napi-rs
// generates from src/call.rs (native.d.ts) must be assignable to the interfaces of ts/sql-backend.ts.
import type { BackendCalls } from '../../ts/redis-backend';
import type { SqlBackend } from '../../ts/sql-backend';
import type * as Native from '../../native';

declare const native: typeof Native;

export const postgres: BackendCalls = native.NativeCalls.postgres('ratewindow');
export const sqlite: BackendCalls = native.NativeCalls.sqlite('ratewindow');
export const sql: SqlBackend = {
  createPostgres: (prefix: string, durable?: boolean) => native.NativeCalls.postgres(prefix, durable),
  createSqlite: (prefix: string) => native.NativeCalls.sqlite(prefix),
};
