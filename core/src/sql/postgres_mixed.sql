-- ---- Batches mixing algorithms (ratewindow_core's Postgres::mixed, cargo feature `mixed`) ---------
-- One statement, one transaction: `SELECT * FROM {p}_mixed(...)`. Entry i is of kind p_kinds[i] (0
-- the sliding log, 1 GCRA, 2 the counter) on p_keys[i], with its uses, window and cost, and for GCRA
-- the constants {p}_gcra takes (p_q, p_r, p_d, p_e; 0 for the other kinds). It answers every key's
-- state as it found it, the rows (0, key, at, expires_at) a call time of a log, (1, key, ms, rem, per)
-- a GCRA bucket, (2, key, start, window, cur, prev) a counter, then the row (-1, NULL, now, verdict):
-- the engine decides the batch from that state by the memory store's rules and checks the verdict
-- (1 allowed and recorded, 0 refused and nothing written, -1 a peek) against its own.
-- 'p' peeks: one read (one snapshot), no locks, no writes. 'c' consumes: every key's row locked in one
-- global order (logs, GCRA buckets, counters, each in ascending key order; the single-algorithm calls
-- lock a subsequence of it, so no two calls wait on each other in a cycle), a key without a row
-- getting one (rolled back with a refusal); then under the locks, at one clock (never before the
-- newest call of its logs), the sliding-log entries checked (a key named twice is one call at the
-- largest cost), the GCRA and counter entries counted in order by {p}_gcra and {p}_counter (entries
-- naming one key see the earlier ones' uses), and the logs recorded; any refusal rolls the whole
-- batch back (a subtransaction), so it is all or nothing.
CREATE OR REPLACE FUNCTION {p}_mixed(p_mode text, p_id text, p_kinds bigint[], p_keys text[], p_uses bigint[],
  p_windows bigint[], p_costs bigint[], p_q bigint[], p_r bigint[], p_d bigint[], p_e bigint[], p_relaxed boolean)
RETURNS TABLE (k bigint, key text, a bigint, b bigint, c bigint, d bigint)
-- Generic plans for its statements (and those of {p}_gcra and {p}_counter it calls): planned once a
-- session, not again on every call for its parameters' values (server CPU, 500 calls at load 13: a
-- 2-entry consume ~1.5-1.8 ms -> ~1.1-1.2 ms); each is an index lookup by key whatever the values.
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $fn$
#variable_conflict use_column
DECLARE
  n integer := coalesce(cardinality(p_keys), 0);
  v_logs text[] := ARRAY(SELECT DISTINCT s FROM unnest(p_kinds, p_keys) AS e(t, s) WHERE t = 0);
  v_gcras text[] := ARRAY(SELECT DISTINCT s FROM unnest(p_kinds, p_keys) AS e(t, s) WHERE t = 1);
  v_counters text[] := ARRAY(SELECT DISTINCT s FROM unnest(p_kinds, p_keys) AS e(t, s) WHERE t = 2);
  -- The longest sliding window of the batch: a log's times before it count for no entry, so they are
  -- not answered (the verdict is the same without them; a log of many old calls costs no more).
  v_wmax bigint := coalesce((SELECT max(w) FROM unnest(p_kinds, p_windows) AS e(t, w) WHERE t = 0), 0);
  v_now bigint;
  v_kind bigint;
  v_key text;
  v_mine text[] := '{}';
  v_ats bigint[];
  v_ids text[];
  v_exp bigint;
  v_first integer;
  v_cost bigint;
  v_longest bigint;
  v_ok boolean := true;
  v_setting text;
BEGIN
  IF p_mode IS NULL OR p_mode NOT IN ('c', 'p') THEN
    RAISE EXCEPTION 'ratewindow: unknown mode %', p_mode;
  END IF;
  IF n <> coalesce(cardinality(p_kinds), 0) OR n <> coalesce(cardinality(p_uses), 0)
     OR n <> coalesce(cardinality(p_windows), 0) OR n <> coalesce(cardinality(p_costs), 0)
     OR n <> coalesce(cardinality(p_q), 0) OR n <> coalesce(cardinality(p_r), 0)
     OR n <> coalesce(cardinality(p_d), 0) OR n <> coalesce(cardinality(p_e), 0) THEN
    RAISE EXCEPTION 'ratewindow: the entries'' arrays differ in length';
  END IF;
  IF p_mode = 'p' THEN
    -- One query: one snapshot of every key; the clock read in it is no earlier than any call it sees
    -- (the times a second older than the windows are answered too: the clock is read per row).
    RETURN QUERY
      SELECT 0::bigint, l.key, u.at, l.expires_at, 0::bigint, 0::bigint
        FROM {p}_log l, unnest(l.ats) AS u(at) WHERE l.key = ANY(v_logs)
          AND u.at > floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint - v_wmax - 1000
      UNION ALL SELECT 1::bigint, g.key, g.ms, g.rem, g.per, 0::bigint FROM {p}_gcra g WHERE g.key = ANY(v_gcras)
      UNION ALL SELECT 2::bigint, t.key, t.start_ms, t.window_ms, t.cur, t.prev FROM {p}_counters t
        WHERE t.key = ANY(v_counters)
      UNION ALL SELECT -1::bigint, NULL::text, floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint,
        -1::bigint, 0::bigint, 0::bigint;
    RETURN;
  END IF;
  BEGIN
    FOR v_kind, v_key IN SELECT DISTINCT t, s FROM unnest(p_kinds, p_keys) AS e(t, s) ORDER BY 1, 2 LOOP
      LOOP
        IF v_kind = 0 THEN
          PERFORM FROM {p}_log l WHERE l.key = v_key FOR UPDATE;
        ELSIF v_kind = 1 THEN
          PERFORM FROM {p}_gcra g WHERE g.key = v_key FOR UPDATE;
        ELSIF v_kind = 2 THEN
          PERFORM FROM {p}_counters t WHERE t.key = v_key FOR UPDATE;
        ELSE
          RAISE EXCEPTION 'ratewindow: unknown kind %', v_kind;
        END IF;
        EXIT WHEN FOUND;
        -- No row: one to lock, which stands for no state (this call's own are left out of what it
        -- answers; a refusal rolls them back).
        IF v_kind = 0 THEN
          INSERT INTO {p}_log (key, ats, ids, expires_at) VALUES (v_key, '{}', '{}', 0) ON CONFLICT (key) DO NOTHING;
        ELSIF v_kind = 1 THEN
          INSERT INTO {p}_gcra (key, ms, rem, per) VALUES (v_key, 0, 0, 1) ON CONFLICT (key) DO NOTHING;
        ELSE
          INSERT INTO {p}_counters (key, start_ms, window_ms, cur, prev) VALUES (v_key, 0, 1, 0, 0)
            ON CONFLICT (key) DO NOTHING;
        END IF;
        IF FOUND THEN
          v_mine := v_mine || (v_kind || ':' || v_key);
          EXIT;
        END IF;
      END LOOP;
    END LOOP;
    -- Under the locks: the clock, never before the newest call of the logs (a clock that stepped back).
    v_now := greatest(floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint,
      (SELECT max(l.ats[cardinality(l.ats)]) FROM {p}_log l WHERE l.key = ANY(v_logs)));
    RETURN QUERY
      SELECT 0::bigint, l.key, u.at, l.expires_at, 0::bigint, 0::bigint
        FROM {p}_log l, unnest(l.ats) AS u(at) WHERE l.key = ANY(v_logs) AND u.at > v_now - v_wmax
      UNION ALL SELECT 1::bigint, g.key, g.ms, g.rem, g.per, 0::bigint FROM {p}_gcra g
        WHERE g.key = ANY(v_gcras) AND NOT ('1:' || g.key) = ANY(v_mine)
      UNION ALL SELECT 2::bigint, t.key, t.start_ms, t.window_ms, t.cur, t.prev FROM {p}_counters t
        WHERE t.key = ANY(v_counters) AND NOT ('2:' || t.key) = ANY(v_mine);
    -- The sliding-log entries: a log whose calls have all expired counts none; a key's cost is the
    -- largest its entries give (at most the entry's uses).
    FOR i IN 1 .. n LOOP
      CONTINUE WHEN p_kinds[i] <> 0;
      SELECT l.ats, l.expires_at INTO v_ats, v_exp FROM {p}_log l WHERE l.key = p_keys[i];
      IF v_exp <= v_now OR cardinality(v_ats) = 0 THEN
        v_ats := NULL;
      END IF;
      SELECT max(greatest(e.c, 1)) INTO v_cost FROM unnest(p_kinds, p_keys, p_costs) AS e(t, s, c)
        WHERE e.t = 0 AND e.s = p_keys[i];
      v_first := coalesce(width_bucket(v_now - p_windows[i], v_ats), 0) + 1;
      IF coalesce(cardinality(v_ats), 0) - v_first + 1 + least(v_cost, p_uses[i]) > p_uses[i] THEN
        v_ok := false;
        EXIT;
      END IF;
    END LOOP;
    -- GCRA and counter entries in order, at this clock (each writes only when it allows).
    IF v_ok THEN
      FOR i IN 1 .. n LOOP
        IF p_kinds[i] = 1 THEN
          SELECT g.o_allowed INTO v_ok
            FROM {p}_gcra('c', p_keys[i], p_uses[i], p_q[i], p_r[i], p_d[i], p_e[i], v_now, false) AS g;
        ELSIF p_kinds[i] = 2 THEN
          SELECT t.o_allowed INTO v_ok
            FROM {p}_counter('c', p_keys[i], p_uses[i], p_windows[i], p_costs[i], v_now, false) AS t;
        END IF;
        EXIT WHEN NOT v_ok;
      END LOOP;
    END IF;
    IF NOT v_ok THEN
      RAISE EXCEPTION USING ERRCODE = 'RW001', MESSAGE = 'ratewindow: a mixed batch refused';
    END IF;
    IF p_relaxed THEN
      v_setting := set_config('synchronous_commit', 'off', true);
    END IF;
    -- Each log: the times that left its longest window go (all of a log whose calls all expired), and
    -- the call is recorded at now, once a use of its cost; a log its trimming empties starts afresh.
    FOR v_key, v_longest, v_cost IN
      SELECT s, max(w), max(greatest(c, 1)) FROM unnest(p_kinds, p_keys, p_windows, p_costs) AS e(t, s, w, c)
        WHERE t = 0 GROUP BY s LOOP
      SELECT l.ats, l.ids, l.expires_at INTO v_ats, v_ids, v_exp FROM {p}_log l WHERE l.key = v_key;
      IF v_exp <= v_now THEN
        v_first := coalesce(cardinality(v_ats), 0) + 1;
      ELSE
        v_first := coalesce(width_bucket(v_now - v_longest, v_ats), 0) + 1;
      END IF;
      v_ats := v_ats[v_first:];
      v_ids := v_ids[v_first:];
      IF coalesce(cardinality(v_ats), 0) = 0 THEN
        v_exp := 0;
      END IF;
      UPDATE {p}_log l SET ats = coalesce(v_ats, '{}') || array_fill(v_now, ARRAY[v_cost::integer]),
        ids = coalesce(v_ids, '{}') || ARRAY[p_id] || ARRAY(SELECT p_id || chr(1) || g FROM generate_series(2, v_cost) AS g),
        expires_at = greatest(v_exp, v_now + v_longest)
        WHERE l.key = v_key;
    END LOOP;
  EXCEPTION WHEN SQLSTATE 'RW001' THEN
    v_ok := false;
  END;
  RETURN QUERY SELECT -1::bigint, NULL::text, v_now, CASE WHEN v_ok THEN 1 ELSE 0 END::bigint, 0::bigint, 0::bigint;
END
$fn$;
