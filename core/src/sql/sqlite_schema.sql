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
-- GCRA and the sliding-window counter (ratewindow_core::call::RateOp): one row per key. GCRA: its
-- TAT, ms + rem/per; the counter: its window's start, the window it was counted under, the uses in
-- that window and in the one before. Added in 0.3; installing it on an older file adds them.
CREATE TABLE IF NOT EXISTS {p}_gcra (
  key TEXT PRIMARY KEY,
  ms INTEGER NOT NULL,
  rem INTEGER NOT NULL,
  per INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS {p}_counters (
  key TEXT PRIMARY KEY,
  start_ms INTEGER NOT NULL,
  window_ms INTEGER NOT NULL,
  cur INTEGER NOT NULL,
  prev INTEGER NOT NULL
) WITHOUT ROWID;
