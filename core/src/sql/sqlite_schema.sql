-- ratewindow on SQLite: run once per database file (idempotent). {p} is the name prefix (default
-- `ratewindow`). Times are the host's clock in ms: SQLite runs on one host, so that is one clock.
CREATE TABLE IF NOT EXISTS {p}_calls (
  key TEXT NOT NULL,
  at INTEGER NOT NULL,
  id TEXT NOT NULL,
  expires_at INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS {p}_calls_key_at ON {p}_calls (key, at);
CREATE INDEX IF NOT EXISTS {p}_calls_expires_at ON {p}_calls (expires_at);
CREATE TABLE IF NOT EXISTS {p}_windows (
  key TEXT PRIMARY KEY,
  hits INTEGER NOT NULL,
  ends_at INTEGER NOT NULL
);
-- Locks (ratewindow_core::lock): one row per lock, its owner's token and when it frees itself (ms).
CREATE TABLE IF NOT EXISTS {p}_locks (
  key TEXT PRIMARY KEY,
  owner TEXT NOT NULL,
  expires_at INTEGER NOT NULL
) WITHOUT ROWID;
