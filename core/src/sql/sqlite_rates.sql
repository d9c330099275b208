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
