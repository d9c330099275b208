// A compile-time proof that the napi addon implements the optional SQL boundary: the types napi-rs
// generates from src/sql.rs (native.d.ts) must be assignable to the interfaces of ts/sql-backend.ts.
import type { BackendPostgres, BackendSqlite, SqlBackend } from '../../ts/sql-backend';
import type * as Native from '../../native';

declare const native: typeof Native;

export const postgres: BackendPostgres = new native.NativePostgres('ratewindow');
export const sqlite: BackendSqlite = new native.NativeSqlite('ratewindow');
export const sql: SqlBackend = {
  createPostgres: (prefix: string, durable?: boolean) => new native.NativePostgres(prefix, durable),
  createSqlite: (prefix: string) => new native.NativeSqlite(prefix),
};
