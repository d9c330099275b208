-- ratewindow on PostgreSQL: run once per database (idempotent). {p} is the name prefix (default
-- `ratewindow`), so the objects are {p}_calls, {p}_windows, {p}_consume and {p}_window.
BEGIN;
-- Two processes installing at once take turns.
SELECT pg_advisory_xact_lock(7259046392211300101);

-- A row per recorded call: its key, its time (ms, the server's clock), the call's id (so a release
-- removes exactly its own rows) and when it has left the longest window it was counted under.
CREATE TABLE IF NOT EXISTS {p}_calls (
  key text NOT NULL,
  at bigint NOT NULL,
  id text NOT NULL,
  expires_at bigint NOT NULL
);
CREATE INDEX IF NOT EXISTS {p}_calls_key_at ON {p}_calls (key, at);
CREATE INDEX IF NOT EXISTS {p}_calls_expires_at ON {p}_calls (expires_at);
CREATE INDEX IF NOT EXISTS {p}_calls_id ON {p}_calls (id);

-- A row per fixed window: its count and when it ends (ms, the server's clock).
CREATE TABLE IF NOT EXISTS {p}_windows (
  key text PRIMARY KEY,
  hits bigint NOT NULL,
  ends_at bigint NOT NULL
);

-- The sliding log for every entry of one call, in one statement and one transaction: 'c' consumes
-- (trims, checks every entry, records against all or none), 'p' peeks (writes nothing).
CREATE OR REPLACE FUNCTION {p}_consume(p_mode text, p_id text, p_keys text[], p_uses bigint[], p_windows bigint[])
RETURNS TABLE (allowed boolean, retry_after_ms bigint, retry_timestamp bigint, blocked integer, now_ms bigint)
LANGUAGE plpgsql AS $fn$
#variable_conflict use_column
DECLARE
  v_now bigint;
  v_key text;
  v_longest bigint;
  v_count bigint;
  v_at bigint;
  v_until bigint := -1;
  v_blocked integer := -1;
BEGIN
  IF p_mode IS NULL OR p_mode NOT IN ('c', 'p') THEN
    RAISE EXCEPTION 'ratewindow: unknown mode %', p_mode;
  END IF;
  IF coalesce(cardinality(p_keys), 0) <> coalesce(cardinality(p_uses), 0)
     OR coalesce(cardinality(p_keys), 0) <> coalesce(cardinality(p_windows), 0) THEN
    RAISE EXCEPTION 'ratewindow: keys, uses and windows differ in length';
  END IF;
  -- Each key's lock, in ascending lock order, so two batches naming the same keys never deadlock. A
  -- peek takes them shared: it waits for a consume under way and sees it whole.
  IF p_mode = 'c' THEN
    PERFORM pg_advisory_xact_lock(h) FROM (SELECT DISTINCT hashtextextended(k, 0) AS h FROM unnest(p_keys) AS k ORDER BY 1) AS l;
  ELSE
    PERFORM pg_advisory_xact_lock_shared(h) FROM (SELECT DISTINCT hashtextextended(k, 0) AS h FROM unnest(p_keys) AS k ORDER BY 1) AS l;
  END IF;
  v_now := floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint;

  IF p_mode = 'c' THEN
    -- A call drops the times that have left its (longest) window: now - at >= window.
    FOR v_key, v_longest IN SELECT k, max(w) FROM unnest(p_keys, p_windows) AS e(k, w) GROUP BY k LOOP
      DELETE FROM {p}_calls c WHERE c.key = v_key AND c.at <= v_now - v_longest;
    END LOOP;
  END IF;

  -- Every entry is checked before anything is recorded; the longest wait blocks (ties keep the first).
  FOR i IN 1 .. coalesce(cardinality(p_keys), 0) LOOP
    SELECT count(*) INTO v_count FROM {p}_calls c WHERE c.key = p_keys[i] AND c.at > v_now - p_windows[i];
    IF v_count >= p_uses[i] THEN
      -- The oldest of the newest `uses` calls decides the wait.
      SELECT c.at + p_windows[i] INTO v_at FROM {p}_calls c
        WHERE c.key = p_keys[i] ORDER BY c.at DESC OFFSET p_uses[i] - 1 LIMIT 1;
      IF v_at > v_until THEN
        v_until := v_at;
        v_blocked := i - 1;
      END IF;
    END IF;
  END LOOP;
  IF v_blocked >= 0 THEN
    RETURN QUERY SELECT false, greatest(1, v_until - v_now), v_until, v_blocked, v_now;
    RETURN;
  END IF;

  IF p_mode = 'c' THEN
    FOR v_key, v_longest IN SELECT k, max(w) FROM unnest(p_keys, p_windows) AS e(k, w) GROUP BY k LOOP
      -- A clock that stepped back records at the newest call, keeping the log in order.
      SELECT greatest(v_now, max(c.at)) INTO v_at FROM {p}_calls c WHERE c.key = v_key;
      INSERT INTO {p}_calls (key, at, id, expires_at) VALUES (v_key, v_at, p_id, v_at + v_longest);
    END LOOP;
  END IF;
  RETURN QUERY SELECT true, 0::bigint, -1::bigint, -1, v_now;
END
$fn$;

-- One key's fixed window: 'hit' (adds p_amount, opening a window of p_decay ms if none runs), 'get',
-- 'reset' (count to 0, window kept), 'clear' (count and window). Returns the count and the ms left,
-- (0, 0) for a key without a window.
CREATE OR REPLACE FUNCTION {p}_window(p_op text, p_key text, p_decay bigint, p_amount bigint)
RETURNS TABLE (hits bigint, ms_left bigint)
LANGUAGE plpgsql AS $fn$
#variable_conflict use_column
DECLARE
  v_now bigint;
  v_hits bigint;
  v_ends bigint;
BEGIN
  IF p_op IS NULL OR p_op NOT IN ('hit', 'get', 'reset', 'clear') THEN
    RAISE EXCEPTION 'ratewindow: unknown fixed-window op %', p_op;
  END IF;
  PERFORM pg_advisory_xact_lock(hashtextextended(p_key, 1));
  v_now := floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint;
  IF p_op = 'clear' THEN
    DELETE FROM {p}_windows w WHERE w.key = p_key;
    RETURN QUERY SELECT 0::bigint, 0::bigint;
    RETURN;
  END IF;
  SELECT w.hits, w.ends_at INTO v_hits, v_ends FROM {p}_windows w WHERE w.key = p_key;
  IF NOT FOUND OR v_ends <= v_now THEN
    IF p_op = 'hit' THEN
      INSERT INTO {p}_windows (key, hits, ends_at) VALUES (p_key, p_amount, v_now + p_decay)
        ON CONFLICT (key) DO UPDATE SET hits = excluded.hits, ends_at = excluded.ends_at;
      RETURN QUERY SELECT p_amount, p_decay;
      RETURN;
    END IF;
    -- A window that ended leaves on use.
    DELETE FROM {p}_windows w WHERE w.key = p_key;
    RETURN QUERY SELECT 0::bigint, 0::bigint;
    RETURN;
  END IF;
  IF p_op = 'hit' THEN
    UPDATE {p}_windows w SET hits = w.hits + p_amount WHERE w.key = p_key RETURNING w.hits INTO v_hits;
  ELSIF p_op = 'reset' THEN
    UPDATE {p}_windows w SET hits = 0 WHERE w.key = p_key;
    v_hits := 0;
  END IF;
  RETURN QUERY SELECT v_hits, v_ends - v_now;
END
$fn$;
COMMIT;
