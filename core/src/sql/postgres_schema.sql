-- ratewindow on PostgreSQL: run once per database (idempotent). {p} is the name prefix (default
-- `ratewindow`), so the objects are {p}_log, {p}_windows, {p}_take1, {p}_put1, {p}_sliding1,
-- {p}_sliding, {p}_consume, {p}_window and {p}_attempt. Upgrades the schema of 0.1 and 0.2 in place: their
-- {p}_calls rows move into {p}_log and their functions count there (see the migration below).
BEGIN;
-- Two processes installing at once take turns.
SELECT pg_advisory_xact_lock(7259046392211300101);

-- One row per key: its recorded call times (ms, the server's clock, ascending), the ids of the calls
-- that recorded them (so a release removes exactly its own), and when the newest has left the longest
-- window it was counted under (for the purge). Only the key is indexed, so updates stay HOT.
CREATE TABLE IF NOT EXISTS {p}_log (
  key text PRIMARY KEY,
  ats bigint[] NOT NULL,
  ids text[] NOT NULL,
  expires_at bigint NOT NULL
) WITH (fillfactor = 50);

-- A busy key's arrays outgrow the row (past ~2 KB they move out of line): stored uncompressed, since
-- every call rewrites them whole and compressing (pglz) cost an allowed call on a key of 2,000 recent
-- calls ~2.4x the server CPU, and decompressing a refusal's read ~2.5x. Small rows are unaffected
-- (they stay inline). Set once: the ALTER takes the table's lock briefly, so a later install skips it.
DO $st$
BEGIN
  IF EXISTS (SELECT FROM pg_attribute a WHERE a.attrelid = to_regclass('{p}_log') AND a.attname IN ('ats', 'ids')
             AND a.attstorage <> 'e') THEN
    ALTER TABLE {p}_log ALTER COLUMN ats SET STORAGE EXTERNAL, ALTER COLUMN ids SET STORAGE EXTERNAL;
  END IF;
END
$st$;

-- Upgrading from 0.1/0.2, whose log was a row per call in {p}_calls: those rows move into {p}_log
-- (merged with any already there), and {p}_calls stays, empty, for the release and purge statements of
-- processes not yet upgraded (their give-backs find nothing until they are). Writers of the old table
-- are waited for; from this commit on every function of the prefix counts in {p}_log.
DO $mig$
BEGIN
  IF to_regclass('{p}_calls') IS NOT NULL THEN
    LOCK TABLE {p}_calls IN EXCLUSIVE MODE;
    INSERT INTO {p}_log AS l (key, ats, ids, expires_at)
      SELECT c.key, array_agg(c.at ORDER BY c.at, c.id), array_agg(c.id ORDER BY c.at, c.id), max(c.expires_at)
      FROM {p}_calls c GROUP BY c.key
      ON CONFLICT (key) DO UPDATE SET
        ats = (SELECT array_agg(u.a ORDER BY u.a, u.d) FROM unnest(l.ats || excluded.ats, l.ids || excluded.ids) AS u(a, d)),
        ids = (SELECT array_agg(u.d ORDER BY u.a, u.d) FROM unnest(l.ats || excluded.ats, l.ids || excluded.ids) AS u(a, d)),
        expires_at = greatest(l.expires_at, excluded.expires_at);
    DELETE FROM {p}_calls;
  END IF;
END
$mig$;

-- A row per fixed window: its count and when it ends (ms, the server's clock).
CREATE TABLE IF NOT EXISTS {p}_windows (
  key text PRIMARY KEY,
  hits bigint NOT NULL,
  ends_at bigint NOT NULL
);

-- One entry, the usual call: what the one-entry statement (`Postgres::plan_consume_many` for one entry)
-- runs when the row it read does not refuse the call, and what {p}_sliding1 runs. Its verdict as
-- the nine numbers of the statement's row (allowed as 1 or 0), an array, so no type is installed.
-- p_now NULL: the row is read here first; else p_ats/p_ids are the key's row as the statement read
-- it (NULL: none) and p_now its clock read after the row. A refusal (or a peek) answers from what was
-- read and writes nothing; an allowed consume writes the row back only if it is still what was read
-- (compared under the row's lock: a concurrent writer's change fails the comparison), or inserts it
-- if there was none, and otherwise reads again.
CREATE OR REPLACE FUNCTION {p}_take1(p_mode text, p_id text, p_key text, p_uses bigint, p_window bigint,
  p_relaxed boolean, p_ats bigint[], p_ids text[], p_now bigint)
RETURNS bigint[]
LANGUAGE plpgsql AS $fn$
#variable_conflict use_column
DECLARE
  v_now bigint;
  v_ats bigint[];
  v_ids text[];
  v_len integer;
  v_first integer;
  v_cut bigint;
  v_count bigint;
  v_until bigint;
  v_at bigint;
  v_wait bigint;
  v_found boolean;
  v_setting text;
  v bigint[];
BEGIN
  -- The statement's consume it did not refuse: one write by compare-and-set, in one SQL statement.
  -- Every expression here, the UPDATE's included, is set up again in every transaction (PostgreSQL
  -- builds an executor's expressions per execution), so the usual call carries as few as it can:
  -- the window's first call found once, the verdict built after the UPDATE rather than in its
  -- RETURNING (callgrind, an allowed call: 289,095 -> 275,108 server instructions).
  -- The statement read p_now after the row and no earlier than its newest call, and found fewer than
  -- p_uses calls inside the window: the calls that left it go, this one is recorded at p_now.
  IF p_now IS NOT NULL AND p_mode = 'c' THEN
    IF p_relaxed THEN
      v_setting := set_config('synchronous_commit', 'off', true);
    END IF;
    IF p_ats IS NULL THEN
      INSERT INTO {p}_log (key, ats, ids, expires_at) VALUES (p_key, ARRAY[p_now], ARRAY[p_id], p_now + p_window)
        ON CONFLICT (key) DO NOTHING
        RETURNING ARRAY[1, 0, -1, -1, p_now, p_uses, p_uses - 1, p_window, p_window] INTO v;
    ELSE
      -- The times are ascending, so the calls still inside the window (at > now - window) are the
      -- suffix after the width_bucket(now - window, ats) times at or before the cut (a binary search).
      v_first := width_bucket(p_now - p_window, p_ats) + 1;
      UPDATE {p}_log l SET ats = p_ats[v_first:] || p_now, ids = p_ids[v_first:] || p_id,
        expires_at = greatest(l.expires_at, p_now + p_window)
        WHERE l.key = p_key AND l.ats = p_ats AND l.ids = p_ids;
      IF FOUND THEN
        RETURN ARRAY[1, 0, -1, -1, p_now, p_uses, p_uses - cardinality(p_ats) + v_first - 2,
          coalesce(p_ats[v_first], p_now) + p_window - p_now, p_window];
      END IF;
    END IF;
    IF v IS NOT NULL THEN
      RETURN v;
    END IF;
    -- Lost to a concurrent writer: read again.
    p_now := NULL;
  END IF;
  IF p_mode IS NULL OR p_mode NOT IN ('c', 'p') THEN
    RAISE EXCEPTION 'ratewindow: unknown mode %', p_mode;
  END IF;
  LOOP
    IF p_now IS NULL THEN
      SELECT l.ats, l.ids INTO v_ats, v_ids FROM {p}_log l WHERE l.key = p_key;
      v_found := FOUND;
      v_len := coalesce(cardinality(v_ats), 0);
      -- The clock read after the row, and never before the newest call in it (a clock that stepped
      -- back): every time the call answers lies within the window.
      v_now := greatest(floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint, v_ats[v_len]);
    ELSE
      -- The statement's read, once; a lost comparison reads again.
      v_ats := p_ats;
      v_ids := p_ids;
      v_found := p_ats IS NOT NULL;
      v_len := coalesce(cardinality(v_ats), 0);
      v_now := greatest(p_now, v_ats[v_len]);
      p_now := NULL;
    END IF;
    v_cut := v_now - p_window;
    -- The calls inside the window are a suffix: the first follows the times at or before the cut.
    v_first := coalesce(width_bucket(v_cut, v_ats), 0) + 1;
    v_count := v_len - v_first + 1;
    IF v_count >= p_uses THEN
      v_until := v_ats[v_len - p_uses + 1] + p_window;
      v_wait := greatest(1, v_until - v_now);
      RETURN ARRAY[0, v_wait, v_until, 0, v_now, p_uses, 0, v_wait, v_ats[v_len] + p_window - v_now];
    END IF;
    IF p_mode = 'p' THEN
      -- No call inside the window (the row's have all left it): nothing to refill or reset.
      RETURN ARRAY[1, 0, -1, -1, v_now, p_uses, p_uses - v_count,
        coalesce(v_ats[v_first] + p_window - v_now, 0),
        CASE WHEN v_count > 0 THEN v_ats[v_len] + p_window - v_now ELSE 0 END];
    END IF;
    IF p_relaxed THEN
      v_setting := set_config('synchronous_commit', 'off', true);
    END IF;
    -- Times outside the window leave; the call is recorded at now, after every call of the key.
    v_at := v_now;
    IF v_found THEN
      UPDATE {p}_log l SET ats = v_ats[v_first:] || v_at, ids = v_ids[v_first:] || p_id,
        expires_at = greatest(l.expires_at, v_at + p_window)
        WHERE l.key = p_key AND l.ats = v_ats AND l.ids = v_ids;
    ELSE
      INSERT INTO {p}_log (key, ats, ids, expires_at) VALUES (p_key, ARRAY[v_at], ARRAY[p_id], v_at + p_window)
        ON CONFLICT (key) DO NOTHING;
    END IF;
    EXIT WHEN FOUND;
  END LOOP;
  RETURN ARRAY[1, 0, -1, -1, v_now, p_uses, p_uses - v_count - 1,
    coalesce(v_ats[v_first], v_at) + p_window - v_now, v_at + p_window - v_now];
END
$fn$;

-- One entry's consume that the one-entry statement did not refuse: the usual allowed call. p_ats is the
-- key's times as the statement read them (NULL: no row), p_tid where it read them (the row's ctid) and
-- p_now its clock read after the row. One UPDATE of the row at p_tid whose times are still p_ats: a
-- TID scan (no index descent), the new arrays built from the row itself. A concurrent writer makes a
-- new version elsewhere: an UPDATE that waited on it rechecks the new version (PostgreSQL 15 also
-- compares its TID; the times are compared whatever the server), so a lost comparison, or no row, goes
-- to {p}_take1 (which reads again, or inserts). Decided by the times alone: a row's ids change only
-- with its times. Fewer statements than {p}_take1 (PL/pgSQL sets up every expression in
-- every transaction): callgrind of a single-user backend, an allowed call 267,583 -> 229,755 server
-- instructions (the statement included).
CREATE OR REPLACE FUNCTION {p}_put1(p_id text, p_key text, p_uses bigint, p_window bigint, p_relaxed boolean,
  p_ats bigint[], p_now bigint, p_tid tid)
RETURNS bigint[]
LANGUAGE plpgsql AS $fn$
DECLARE
  -- The calls still inside the window (at > now - window) are the suffix after the times at or before
  -- the cut (the times are ascending: a binary search).
  v_first integer := width_bucket(p_now - p_window, p_ats) + 1;
  v_setting text;
BEGIN
  IF p_relaxed THEN
    v_setting := set_config('synchronous_commit', 'off', true);
  END IF;
  UPDATE {p}_log l SET ats = l.ats[v_first:] || p_now, ids = l.ids[v_first:] || p_id,
    expires_at = greatest(l.expires_at, p_now + p_window)
    WHERE l.ctid = p_tid AND l.ats = p_ats;
  IF FOUND THEN
    RETURN ARRAY[1, 0, -1, -1, p_now, p_uses, p_uses - cardinality(p_ats) + v_first - 2,
      coalesce(p_ats[v_first], p_now) + p_window - p_now, p_window];
  END IF;
  -- No row (insert it at p_now), or lost to a concurrent writer (read again).
  RETURN {p}_take1('c', p_id, p_key, p_uses, p_window, p_relaxed, NULL, NULL,
    CASE WHEN p_ats IS NULL THEN p_now END);
END
$fn$;

-- One entry as one row of OUT parameters: {p}_take1 reading the row itself. What {p}_sliding runs for
-- one entry, and what processes of the previous version call.
CREATE OR REPLACE FUNCTION {p}_sliding1(p_mode text, p_id text, p_key text, p_uses bigint, p_window bigint,
  p_relaxed boolean, OUT allowed boolean, OUT retry_after_ms bigint, OUT retry_timestamp bigint,
  OUT blocked integer, OUT now_ms bigint, OUT quota_limit bigint, OUT remaining bigint,
  OUT refill_after_ms bigint, OUT reset_after_ms bigint)
LANGUAGE plpgsql AS $fn$
DECLARE
  v bigint[] := {p}_take1(p_mode, p_id, p_key, p_uses, p_window, p_relaxed, NULL, NULL, NULL);
BEGIN
  allowed := v[1] = 1; retry_after_ms := v[2]; retry_timestamp := v[3]; blocked := v[4]; now_ms := v[5];
  quota_limit := v[6]; remaining := v[7]; refill_after_ms := v[8]; reset_after_ms := v[9];
END
$fn$;

-- The sliding log for every entry of one call, in one statement and one transaction: 'c' consumes
-- (trims, checks every entry, records against all or none), 'p' peeks (writes nothing). Besides the
-- verdict, the quota of the call's tightest entry (fewest uses left, ties the longer window, then the
-- first; on a refusal the blocked entry): its uses, the uses left after the call, the ms until its
-- oldest call in the window leaves and until its newest does. Times by the server's clock_timestamp().
CREATE OR REPLACE FUNCTION {p}_sliding(p_mode text, p_id text, p_keys text[], p_uses bigint[], p_windows bigint[],
  p_relaxed boolean)
RETURNS TABLE (allowed boolean, retry_after_ms bigint, retry_timestamp bigint, blocked integer, now_ms bigint,
  quota_limit bigint, remaining bigint, refill_after_ms bigint, reset_after_ms bigint)
LANGUAGE plpgsql AS $fn$
#variable_conflict use_column
DECLARE
  n integer := coalesce(cardinality(p_keys), 0);
  v_now bigint;
  v_ats bigint[];
  v_ids text[];
  v_len integer;
  v_first integer;
  v_cut bigint;
  v_count bigint;
  v_until bigint;
  v_blocked integer;
  v_at bigint;
  v_wait bigint;
  v_key text;
  v_longest bigint;
  v_counts bigint[];
  v_mins bigint[];
  v_maxs bigint[];
  v_best integer;
  v_left bigint;
  v_best_left bigint;
  v_taken bigint := CASE WHEN p_mode = 'c' THEN 1 ELSE 0 END;
  v_locked boolean := false;
  v_found boolean;
  v_newest bigint;
  v_setting text;
BEGIN
  IF p_mode IS NULL OR p_mode NOT IN ('c', 'p') THEN
    RAISE EXCEPTION 'ratewindow: unknown mode %', p_mode;
  END IF;
  IF n <> coalesce(cardinality(p_uses), 0) OR n <> coalesce(cardinality(p_windows), 0) THEN
    RAISE EXCEPTION 'ratewindow: keys, uses and windows differ in length';
  END IF;
  -- One entry, the usual call: {p}_sliding1.
  IF n = 1 THEN
    RETURN QUERY SELECT * FROM {p}_sliding1(p_mode, p_id, p_keys[1], p_uses[1], p_windows[1], p_relaxed);
    RETURN;
  END IF;

  -- A batch, in two passes: the first reads without locks and answers refusals and peeks (a refusal writes
  -- nothing, so what a snapshot saw is what the call answers); a consume it would allow locks its keys'
  -- rows, in ascending key order (two batches never deadlock), reads again and records.
  v_now := floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint;
  LOOP
    v_until := -1;
    v_blocked := -1;
    v_newest := NULL;
    FOR i IN 1 .. n LOOP
      SELECT l.ats INTO v_ats FROM {p}_log l WHERE l.key = p_keys[i];
      v_len := coalesce(cardinality(v_ats), 0);
      v_newest := greatest(v_newest, v_ats[v_len]);
      v_cut := v_now - p_windows[i];
      -- The times are ascending: the calls inside the window (at > now - window) are a suffix, after
      -- the width_bucket(cut, ats) times at or before the cut (a binary search).
      v_first := coalesce(width_bucket(v_cut, v_ats), 0) + 1;
      v_count := v_len - v_first + 1;
      v_counts[i] := v_count;
      v_mins[i] := v_ats[v_first];
      -- The newest call inside this entry's window (none: a peek's reset is 0, as in memory).
      v_maxs[i] := CASE WHEN v_count > 0 THEN v_ats[v_len] END;
      IF v_count >= p_uses[i] THEN
        -- The oldest of the newest `uses` calls decides the wait; the longest wait blocks (ties keep
        -- the first).
        v_at := v_ats[v_len - p_uses[i] + 1] + p_windows[i];
        IF v_at > v_until THEN
          v_until := v_at;
          v_blocked := i - 1;
        END IF;
      END IF;
    END LOOP;
    -- A call newer than the clock read (recorded meanwhile, or a clock that stepped back): the pass
    -- again at that time, so every time the call answers lies within the window.
    IF v_newest > v_now THEN
      v_now := v_newest;
      CONTINUE;
    END IF;
    EXIT WHEN v_blocked >= 0 OR p_mode = 'p' OR v_locked;
    -- Relaxed (the planner's default): a rate limit's last moments may be lost in a crash, so this
    -- call's own transaction need not wait for the WAL flush. Planned only for a statement that is its
    -- whole transaction, never inside a caller's.
    IF p_relaxed THEN
      v_setting := set_config('synchronous_commit', 'off', true);
    END IF;
    -- Each key's row, locked in ascending key order; a key without one gets one (a concurrent
    -- insert of the same key is waited for, then locked).
    FOR v_key IN SELECT DISTINCT k FROM unnest(p_keys) AS k ORDER BY 1 LOOP
      LOOP
        PERFORM FROM {p}_log l WHERE l.key = v_key FOR UPDATE;
        EXIT WHEN FOUND;
        INSERT INTO {p}_log (key, ats, ids, expires_at) VALUES (v_key, '{}', '{}', 0) ON CONFLICT (key) DO NOTHING;
        EXIT WHEN FOUND;
      END LOOP;
    END LOOP;
    v_locked := true;
    -- Under the locks: the clock again (later than every call the rows can hold but a stepped-back one).
    v_now := greatest(v_now, floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint);
  END LOOP;

  IF v_blocked >= 0 THEN
    v_wait := greatest(1, v_until - v_now);
    RETURN QUERY SELECT false, v_wait, v_until, v_blocked, v_now, p_uses[v_blocked + 1], 0::bigint, v_wait,
      v_maxs[v_blocked + 1] + p_windows[v_blocked + 1] - v_now;
    RETURN;
  END IF;

  IF p_mode = 'c' THEN
    FOR v_key, v_longest IN SELECT k, max(w) FROM unnest(p_keys, p_windows) AS e(k, w) GROUP BY k LOOP
      -- A call drops the times that have left its (longest) window: now - at >= window.
      UPDATE {p}_log l SET ats = t.ats || greatest(v_now, l.ats[cardinality(l.ats)]),
        ids = t.ids || p_id,
        expires_at = greatest(l.expires_at, greatest(v_now, l.ats[cardinality(l.ats)]) + v_longest)
        FROM (SELECT coalesce(array_agg(a ORDER BY o), '{}') AS ats, coalesce(array_agg(d ORDER BY o), '{}') AS ids
              FROM {p}_log s, unnest(s.ats, s.ids) WITH ORDINALITY AS u(a, d, o)
              WHERE s.key = v_key AND u.a > v_now - v_longest) AS t
        WHERE l.key = v_key;
    END LOOP;
  END IF;
  -- The tightest entry: fewest uses left, ties the longer window, then the first.
  v_best := 0;
  FOR i IN 1 .. n LOOP
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

-- 0.1's {p}_consume (no commit parameter), if installed: the same verdict, counted in {p}_log.
DO $mig$
BEGIN
  IF to_regprocedure('{p}_consume(text, text, text[], bigint[], bigint[])') IS NOT NULL THEN
    CREATE OR REPLACE FUNCTION {p}_consume(p_mode text, p_id text, p_keys text[], p_uses bigint[], p_windows bigint[])
    RETURNS TABLE (allowed boolean, retry_after_ms bigint, retry_timestamp bigint, blocked integer, now_ms bigint)
    LANGUAGE sql AS $fn$
      SELECT s.allowed, s.retry_after_ms, s.retry_timestamp, s.blocked, s.now_ms
      FROM {p}_sliding(p_mode, p_id, p_keys, p_uses, p_windows, false) AS s
    $fn$;
  END IF;
END
$mig$;

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

-- ---- Locks (ratewindow_core::lock) ----------------------------------------------------------------
-- One row per lock: its owner's token and when it frees itself (the server's clock). Each lock
-- operation is one statement on this table (an upsert that takes an expired or absent lock, a
-- compare-and-delete release). Added in 0.3; installing it on an older schema only adds the table.
CREATE TABLE IF NOT EXISTS {p}_locks (
  key text PRIMARY KEY,
  owner text NOT NULL,
  expires_at timestamptz NOT NULL
);

