-- ratewindow on PostgreSQL: run once per database (idempotent). {p} is the name prefix (default
-- `ratewindow`), so the objects are {p}_calls, {p}_windows, {p}_sliding, {p}_consume, {p}_window and
-- {p}_attempt.
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
-- (trims, checks every entry, records against all or none), 'p' peeks (writes nothing). Besides the
-- verdict, the quota of the call's tightest entry (fewest uses left, ties the longer window, then the
-- first; on a refusal the blocked entry): its uses, the uses left after the call, the ms until its
-- oldest call in the window leaves and until its newest does.
CREATE OR REPLACE FUNCTION {p}_sliding(p_mode text, p_id text, p_keys text[], p_uses bigint[], p_windows bigint[],
  p_relaxed boolean)
RETURNS TABLE (allowed boolean, retry_after_ms bigint, retry_timestamp bigint, blocked integer, now_ms bigint,
  quota_limit bigint, remaining bigint, refill_after_ms bigint, reset_after_ms bigint)
LANGUAGE plpgsql AS $fn$
#variable_conflict use_column
DECLARE
  v_now bigint;
  v_key text;
  v_longest bigint;
  v_count bigint;
  v_min bigint;
  v_at bigint;
  v_until bigint := -1;
  v_blocked integer := -1;
  v_wait bigint;
  v_counts bigint[];
  v_mins bigint[];
  v_maxs bigint[];
  v_best integer := 0;
  v_left bigint;
  v_best_left bigint;
  v_taken bigint := CASE WHEN p_mode = 'c' THEN 1 ELSE 0 END;
BEGIN
  IF p_mode IS NULL OR p_mode NOT IN ('c', 'p') THEN
    RAISE EXCEPTION 'ratewindow: unknown mode %', p_mode;
  END IF;
  IF coalesce(cardinality(p_keys), 0) <> coalesce(cardinality(p_uses), 0)
     OR coalesce(cardinality(p_keys), 0) <> coalesce(cardinality(p_windows), 0) THEN
    RAISE EXCEPTION 'ratewindow: keys, uses and windows differ in length';
  END IF;
  -- Relaxed (the planner's default): a rate limit's last moments may be lost in a crash, so this
  -- call's own transaction need not wait for the WAL flush. Planned only for a statement that is its
  -- whole transaction, never inside a caller's.
  IF p_relaxed THEN
    PERFORM set_config('synchronous_commit', 'off', true);
  END IF;
  -- One entry, the usual call: the same rules in four statements.
  IF cardinality(p_keys) = 1 THEN
    IF p_mode = 'c' THEN
      PERFORM pg_advisory_xact_lock(hashtextextended(p_keys[1], 0));
    ELSE
      PERFORM pg_advisory_xact_lock_shared(hashtextextended(p_keys[1], 0));
    END IF;
    v_now := floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint;
    IF p_mode = 'c' THEN
      DELETE FROM {p}_calls c WHERE c.key = p_keys[1] AND c.at <= v_now - p_windows[1];
    END IF;
    SELECT count(*), min(c.at), max(c.at) INTO v_count, v_min, v_at FROM {p}_calls c
      WHERE c.key = p_keys[1] AND c.at > v_now - p_windows[1];
    IF v_count >= p_uses[1] THEN
      SELECT c.at + p_windows[1] INTO v_until FROM {p}_calls c
        WHERE c.key = p_keys[1] ORDER BY c.at DESC OFFSET p_uses[1] - 1 LIMIT 1;
      v_wait := greatest(1, v_until - v_now);
      RETURN QUERY SELECT false, v_wait, v_until, 0, v_now,
        p_uses[1], 0::bigint, v_wait, v_at + p_windows[1] - v_now;
      RETURN;
    END IF;
    IF p_mode = 'c' THEN
      -- Trimmed above, so the newest call inside the window is the newest call.
      v_at := greatest(v_now, v_at);
      INSERT INTO {p}_calls (key, at, id, expires_at) VALUES (p_keys[1], v_at, p_id, v_at + p_windows[1]);
      RETURN QUERY SELECT true, 0::bigint, -1::bigint, -1, v_now,
        p_uses[1], p_uses[1] - v_count - 1, coalesce(v_min, v_at) + p_windows[1] - v_now, v_at + p_windows[1] - v_now;
      RETURN;
    END IF;
    RETURN QUERY SELECT true, 0::bigint, -1::bigint, -1, v_now, p_uses[1], p_uses[1] - v_count,
      coalesce(v_min + p_windows[1] - v_now, 0), coalesce(v_at + p_windows[1] - v_now, 0);
    RETURN;
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
    SELECT count(*), min(c.at), max(c.at) INTO v_count, v_min, v_at FROM {p}_calls c
      WHERE c.key = p_keys[i] AND c.at > v_now - p_windows[i];
    v_counts[i] := v_count;
    v_mins[i] := v_min;
    v_maxs[i] := v_at;
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
    v_wait := greatest(1, v_until - v_now);
    RETURN QUERY SELECT false, v_wait, v_until, v_blocked, v_now, p_uses[v_blocked + 1], 0::bigint, v_wait,
      v_maxs[v_blocked + 1] + p_windows[v_blocked + 1] - v_now;
    RETURN;
  END IF;

  IF p_mode = 'c' THEN
    FOR v_key, v_longest IN SELECT k, max(w) FROM unnest(p_keys, p_windows) AS e(k, w) GROUP BY k LOOP
      -- A clock that stepped back records at the newest call, keeping the log in order.
      SELECT greatest(v_now, max(c.at)) INTO v_at FROM {p}_calls c WHERE c.key = v_key;
      INSERT INTO {p}_calls (key, at, id, expires_at) VALUES (v_key, v_at, p_id, v_at + v_longest);
    END LOOP;
  END IF;
  -- The tightest entry: fewest uses left, ties the longer window, then the first.
  FOR i IN 1 .. coalesce(cardinality(p_keys), 0) LOOP
    v_left := p_uses[i] - v_counts[i] - v_taken;
    IF v_best = 0 OR v_left < v_best_left OR (v_left = v_best_left AND p_windows[i] > p_windows[v_best]) THEN
      v_best := i;
      v_best_left := v_left;
    END IF;
  END LOOP;
  IF v_best = 0 THEN
    RETURN QUERY SELECT true, 0::bigint, -1::bigint, -1, v_now, 0::bigint, 0::bigint, 0::bigint, 0::bigint;
  ELSIF p_mode = 'c' THEN
    -- The call was recorded at the newest of now and the key's calls; calls of the key outside this
    -- entry's window are older than now, so its own newest decides.
    v_at := greatest(v_now, v_maxs[v_best]);
    RETURN QUERY SELECT true, 0::bigint, -1::bigint, -1, v_now, p_uses[v_best], v_best_left,
      coalesce(v_mins[v_best], v_at) + p_windows[v_best] - v_now, v_at + p_windows[v_best] - v_now;
  ELSE
    RETURN QUERY SELECT true, 0::bigint, -1::bigint, -1, v_now, p_uses[v_best], v_best_left,
      coalesce(v_mins[v_best] + p_windows[v_best] - v_now, 0), coalesce(v_maxs[v_best] + p_windows[v_best] - v_now, 0);
  END IF;
END
$fn$;

-- The verdict without the quota, for processes of an earlier version sharing the database.
CREATE OR REPLACE FUNCTION {p}_consume(p_mode text, p_id text, p_keys text[], p_uses bigint[], p_windows bigint[],
  p_relaxed boolean)
RETURNS TABLE (allowed boolean, retry_after_ms bigint, retry_timestamp bigint, blocked integer, now_ms bigint)
LANGUAGE sql AS $fn$
  SELECT s.allowed, s.retry_after_ms, s.retry_timestamp, s.blocked, s.now_ms
  FROM {p}_sliding(p_mode, p_id, p_keys, p_uses, p_windows, p_relaxed) AS s
$fn$;

-- One key's fixed window: 'hit' (adds p_amount, opening a window of p_decay ms if none runs), 'get',
-- 'reset' (count to 0, window kept), 'clear' (count and window). Returns the count and the ms left,
-- (0, 0) for a key without a window.
CREATE OR REPLACE FUNCTION {p}_window(p_op text, p_key text, p_decay bigint, p_amount bigint, p_relaxed boolean)
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
  -- Relaxed (the planner's default): a rate limit's last moments may be lost in a crash, so this
  -- call's own transaction need not wait for the WAL flush. Planned only for a statement that is its
  -- whole transaction, never inside a caller's.
  IF p_relaxed THEN
    PERFORM set_config('synchronous_commit', 'off', true);
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

-- One key's fixed window, atomically: one hit if the window holds fewer than p_max, else nothing (a
-- window of p_decay ms opens on a counted hit when none runs). Returns whether the hit was counted,
-- the count after the call and the ms left (0 without a window).
CREATE OR REPLACE FUNCTION {p}_attempt(p_key text, p_max bigint, p_decay bigint, p_relaxed boolean)
RETURNS TABLE (counted boolean, hits bigint, ms_left bigint)
LANGUAGE plpgsql AS $fn$
#variable_conflict use_column
DECLARE
  v_now bigint;
  v_hits bigint;
  v_ends bigint;
BEGIN
  IF p_relaxed THEN
    PERFORM set_config('synchronous_commit', 'off', true);
  END IF;
  -- The lock {p}_window takes: attempts and hits on one key take turns.
  PERFORM pg_advisory_xact_lock(hashtextextended(p_key, 1));
  v_now := floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint;
  SELECT w.hits, w.ends_at INTO v_hits, v_ends FROM {p}_windows w WHERE w.key = p_key;
  IF NOT FOUND OR v_ends <= v_now THEN
    IF p_max < 1 THEN
      RETURN QUERY SELECT false, 0::bigint, 0::bigint;
      RETURN;
    END IF;
    INSERT INTO {p}_windows (key, hits, ends_at) VALUES (p_key, 1, v_now + p_decay)
      ON CONFLICT (key) DO UPDATE SET hits = excluded.hits, ends_at = excluded.ends_at;
    RETURN QUERY SELECT true, 1::bigint, p_decay;
    RETURN;
  END IF;
  IF v_hits >= p_max THEN
    RETURN QUERY SELECT false, v_hits, v_ends - v_now;
    RETURN;
  END IF;
  UPDATE {p}_windows w SET hits = w.hits + 1 WHERE w.key = p_key RETURNING w.hits INTO v_hits;
  RETURN QUERY SELECT true, v_hits, v_ends - v_now;
END
$fn$;
COMMIT;
