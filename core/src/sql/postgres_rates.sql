-- ---- GCRA and the sliding-window counter (ratewindow_core::call::RateOp) -------------------------
-- One row per key. GCRA: its TAT (when the bucket is full again), ms + rem/per (per: the uses the
-- fraction is counted in). The counter: its window's start, the window it was counted under, the uses
-- in that window and in the one before. Each call is one statement, `SELECT * FROM {p}_gcra(...)` or
-- `{p}_counter(...)`, on the server's clock (p_now NULL) under the key's row lock; it answers the
-- state it found (NULLs: none, or one that no longer counts) and the engine derives the verdict from
-- it, as from the Redis scripts' replies. Added in 0.3; installing it on an older schema adds them.
CREATE TABLE IF NOT EXISTS {p}_gcra (
  key text PRIMARY KEY,
  ms bigint NOT NULL,
  rem bigint NOT NULL,
  per bigint NOT NULL
);
CREATE TABLE IF NOT EXISTS {p}_counters (
  key text PRIMARY KEY,
  start_ms bigint NOT NULL,
  window_ms bigint NOT NULL,
  cur bigint NOT NULL,
  prev bigint NOT NULL
);

-- p_mode 'c' consume, 'p' peek, 'r' reset. The call costs n*T = p_q + p_r/p_uses; it is allowed iff
-- TAT <= now + tau - n*T = now + p_d + p_e/p_uses (exact integers: core/src/gcra.rs).
CREATE OR REPLACE FUNCTION {p}_gcra(p_mode text, p_key text, p_uses bigint, p_q bigint, p_r bigint,
  p_d bigint, p_e bigint, p_now bigint, p_relaxed boolean)
RETURNS TABLE (o_allowed boolean, o_now bigint, o_ms bigint, o_rem bigint)
LANGUAGE plpgsql AS $fn$
DECLARE
  v_now bigint := coalesce(p_now, floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint);
  v_ms bigint;
  v_rem bigint;
  v_per bigint;
  v_ok boolean := true;
  v_setting text;
BEGIN
  IF p_mode = 'r' THEN
    DELETE FROM {p}_gcra g WHERE g.key = p_key;
    RETURN;
  END IF;
  IF p_mode = 'c' THEN
    SELECT g.ms, g.rem, g.per INTO v_ms, v_rem, v_per FROM {p}_gcra g WHERE g.key = p_key FOR UPDATE;
    IF NOT FOUND THEN
      -- A new key: a row to lock (a concurrent first call waits on it, then reads it).
      INSERT INTO {p}_gcra AS g (key, ms, rem, per) VALUES (p_key, 0, 0, p_uses) ON CONFLICT (key) DO NOTHING;
      SELECT g.ms, g.rem, g.per INTO v_ms, v_rem, v_per FROM {p}_gcra g WHERE g.key = p_key FOR UPDATE;
    END IF;
  ELSIF p_mode = 'p' THEN
    SELECT g.ms, g.rem, g.per INTO v_ms, v_rem, v_per FROM {p}_gcra g WHERE g.key = p_key;
  ELSE
    RAISE EXCEPTION 'ratewindow: unknown mode %', p_mode;
  END IF;
  IF v_ms IS NULL THEN
    v_ms := 0; v_rem := 0; v_per := p_uses;
  END IF;
  -- Counted under other uses: rounded up to the next whole ms (never more uses).
  IF v_per <> p_uses THEN
    IF v_rem > 0 THEN v_ms := v_ms + 1; END IF;
    v_rem := 0;
  END IF;
  IF v_ms < v_now OR (v_ms = v_now AND v_rem = 0) THEN
    v_ms := v_now; v_rem := 0;
  ELSIF v_ms > v_now + p_d OR (v_ms = v_now + p_d AND v_rem > p_e) THEN
    v_ok := false;
  END IF;
  IF v_ok AND p_mode = 'c' THEN
    IF p_relaxed THEN
      v_setting := set_config('synchronous_commit', 'off', true);
    END IF;
    UPDATE {p}_gcra g SET
      ms = v_ms + p_q + CASE WHEN v_rem + p_r >= p_uses THEN 1 ELSE 0 END,
      rem = v_rem + p_r - CASE WHEN v_rem + p_r >= p_uses THEN p_uses ELSE 0 END,
      per = p_uses
      WHERE g.key = p_key;
  END IF;
  IF v_ms = v_now AND v_rem = 0 THEN
    RETURN QUERY SELECT v_ok, v_now, NULL::bigint, NULL::bigint;
  ELSE
    RETURN QUERY SELECT v_ok, v_now, v_ms, v_rem;
  END IF;
END
$fn$;

-- p_mode 'c' consume, 'p' peek, 'r' reset; a call costing p_cost of p_uses per p_window
-- (core/src/counter.rs).
CREATE OR REPLACE FUNCTION {p}_counter(p_mode text, p_key text, p_uses bigint, p_window bigint,
  p_cost bigint, p_now bigint, p_relaxed boolean)
RETURNS TABLE (o_allowed boolean, o_now bigint, o_start bigint, o_window bigint, o_cur bigint,
  o_prev bigint)
LANGUAGE plpgsql AS $fn$
DECLARE
  v_now bigint := coalesce(p_now, floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint);
  v_start bigint;
  v_w bigint;
  v_cur bigint;
  v_prev bigint;
  v_e bigint;
  v_base bigint;
  v_c bigint := 0;
  v_p bigint := 0;
  v_ok boolean;
  v_setting text;
BEGIN
  IF p_mode = 'r' THEN
    DELETE FROM {p}_counters c WHERE c.key = p_key;
    RETURN;
  END IF;
  IF p_mode = 'c' THEN
    SELECT c.start_ms, c.window_ms, c.cur, c.prev INTO v_start, v_w, v_cur, v_prev
      FROM {p}_counters c WHERE c.key = p_key FOR UPDATE;
    IF NOT FOUND THEN
      INSERT INTO {p}_counters AS c (key, start_ms, window_ms, cur, prev) VALUES (p_key, 0, p_window, 0, 0)
        ON CONFLICT (key) DO NOTHING;
      SELECT c.start_ms, c.window_ms, c.cur, c.prev INTO v_start, v_w, v_cur, v_prev
        FROM {p}_counters c WHERE c.key = p_key FOR UPDATE;
    END IF;
  ELSIF p_mode = 'p' THEN
    SELECT c.start_ms, c.window_ms, c.cur, c.prev INTO v_start, v_w, v_cur, v_prev
      FROM {p}_counters c WHERE c.key = p_key;
  ELSE
    RAISE EXCEPTION 'ratewindow: unknown mode %', p_mode;
  END IF;
  -- Counts that weigh nothing at now: no key.
  IF v_start IS NOT NULL AND v_start + v_w * (CASE WHEN v_cur > 0 THEN 2 ELSE 1 END) <= v_now THEN
    v_start := NULL;
  END IF;
  v_e := v_now % p_window;
  v_base := v_now - v_e;
  IF v_start IS NOT NULL THEN
    IF v_w <> p_window OR v_start = v_base THEN
      v_c := v_cur; v_p := v_prev;
    ELSIF v_start > v_base THEN
      -- A clock that stepped back: read at the start of the key's window.
      v_base := v_start; v_e := 0; v_c := v_cur; v_p := v_prev;
    ELSIF v_start + p_window = v_base THEN
      v_p := v_cur;
    END IF;
  END IF;
  v_ok := v_c + p_cost <= p_uses AND v_p * (p_window - v_e) <= (p_uses - v_c - p_cost) * p_window;
  IF v_ok AND p_mode = 'c' THEN
    IF p_relaxed THEN
      v_setting := set_config('synchronous_commit', 'off', true);
    END IF;
    UPDATE {p}_counters c SET start_ms = v_base, window_ms = p_window, cur = v_c + p_cost, prev = v_p
      WHERE c.key = p_key;
  END IF;
  IF v_start IS NULL THEN
    RETURN QUERY SELECT v_ok, v_now, NULL::bigint, NULL::bigint, NULL::bigint, NULL::bigint;
  ELSE
    RETURN QUERY SELECT v_ok, v_now, v_start, v_w, v_cur, v_prev;
  END IF;
END
$fn$;
