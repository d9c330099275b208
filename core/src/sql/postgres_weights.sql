-- Weighted calls on the sliding log (cargo feature `weights`): what a consume or peek runs when an
-- entry costs more than 1 (a call costing 1 runs the one-entry statement or {p}_sliding, unchanged).
-- A call costing n is n times at one moment in {p}_log, with the ids p_id, p_id||chr(1)||2, ..,
-- p_id||chr(1)||n (so a release of p_id||chr(1)||n removes exactly them). Entries naming one key
-- are one call costing their largest cost. A consume locks its keys' rows in ascending key order
-- first (weighted calls are rarer: no optimistic pass), so it is exact under concurrency.
CREATE OR REPLACE FUNCTION {p}_take_n(p_mode text, p_id text, p_keys text[], p_uses bigint[], p_windows bigint[],
  p_costs bigint[], p_relaxed boolean)
RETURNS TABLE (allowed boolean, retry_after_ms bigint, retry_timestamp bigint, blocked integer, now_ms bigint,
  quota_limit bigint, remaining bigint, refill_after_ms bigint, reset_after_ms bigint)
LANGUAGE plpgsql AS $fn$
#variable_conflict use_column
DECLARE
  n integer := coalesce(cardinality(p_keys), 0);
  v_now bigint;
  v_ats bigint[];
  v_len integer;
  v_first integer;
  v_count bigint;
  v_cost bigint;
  v_kc bigint[];
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
  v_newest bigint;
  v_rem bigint;
  v_refill bigint;
  v_reset bigint;
  v_setting text;
BEGIN
  IF p_mode IS NULL OR p_mode NOT IN ('c', 'p') THEN
    RAISE EXCEPTION 'ratewindow: unknown mode %', p_mode;
  END IF;
  IF n <> coalesce(cardinality(p_uses), 0) OR n <> coalesce(cardinality(p_windows), 0)
     OR n <> coalesce(cardinality(p_costs), 0) THEN
    RAISE EXCEPTION 'ratewindow: keys, uses, windows and costs differ in length';
  END IF;
  -- Each entry's key's cost: the largest its entries give.
  SELECT array_agg(m ORDER BY o) INTO v_kc
    FROM (SELECT o, max(greatest(c, 1)) OVER (PARTITION BY k) AS m
          FROM unnest(p_keys, p_costs) WITH ORDINALITY AS e(k, c, o)) AS s;
  IF p_mode = 'c' THEN
    IF p_relaxed THEN
      v_setting := set_config('synchronous_commit', 'off', true);
    END IF;
    FOR v_key IN SELECT DISTINCT k FROM unnest(p_keys) AS k ORDER BY 1 LOOP
      LOOP
        PERFORM FROM {p}_log l WHERE l.key = v_key FOR UPDATE;
        EXIT WHEN FOUND;
        INSERT INTO {p}_log (key, ats, ids, expires_at) VALUES (v_key, '{}', '{}', 0) ON CONFLICT (key) DO NOTHING;
        EXIT WHEN FOUND;
      END LOOP;
    END LOOP;
  END IF;
  v_now := floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint;
  LOOP
    v_until := -1;
    v_blocked := -1;
    v_newest := NULL;
    FOR i IN 1 .. n LOOP
      SELECT l.ats INTO v_ats FROM {p}_log l WHERE l.key = p_keys[i];
      v_len := coalesce(cardinality(v_ats), 0);
      v_newest := greatest(v_newest, v_ats[v_len]);
      v_first := coalesce(width_bucket(v_now - p_windows[i], v_ats), 0) + 1;
      v_count := v_len - v_first + 1;
      v_counts[i] := v_count;
      v_mins[i] := v_ats[v_first];
      v_maxs[i] := CASE WHEN v_count > 0 THEN v_ats[v_len] END;
      v_cost := least(v_kc[i], p_uses[i]);
      IF v_count + v_cost > p_uses[i] THEN
        -- Refused until the oldest of the newest uses - cost + 1 calls leaves; the longest wait blocks.
        v_at := v_ats[v_len + v_cost - p_uses[i]] + p_windows[i];
        IF v_at > v_until THEN
          v_until := v_at;
          v_blocked := i - 1;
          IF v_cost > 1 THEN
            -- The uses that do remain; one back when the oldest call holding one leaves.
            v_rem := greatest(0, p_uses[i] - v_count);
            v_refill := v_ats[v_len - least(v_count, p_uses[i]) + 1] + p_windows[i];
          ELSE
            v_rem := 0;
            v_refill := v_at;
          END IF;
          v_reset := v_ats[v_len] + p_windows[i];
        END IF;
      END IF;
    END LOOP;
    -- A call newer than the clock read (a clock that stepped back): the pass again at that time.
    EXIT WHEN v_newest IS NULL OR v_newest <= v_now;
    v_now := v_newest;
  END LOOP;

  IF v_blocked >= 0 THEN
    v_wait := greatest(1, v_until - v_now);
    RETURN QUERY SELECT false, v_wait, v_now + v_wait, v_blocked, v_now, p_uses[v_blocked + 1], v_rem,
      least(greatest(1, v_refill - v_now), v_wait), greatest(v_reset - v_now, v_wait);
    RETURN;
  END IF;

  IF p_mode = 'c' THEN
    FOR v_key, v_longest, v_cost IN
      SELECT k, max(w), max(greatest(c, 1)) FROM unnest(p_keys, p_windows, p_costs) AS e(k, w, c) GROUP BY k LOOP
      -- The times that left the key's longest window go; the call is recorded v_cost times at the
      -- newest of now and the key's calls.
      UPDATE {p}_log l SET
        ats = l.ats[coalesce(width_bucket(v_now - v_longest, l.ats), 0) + 1:]
          || array_fill(greatest(v_now, l.ats[cardinality(l.ats)]), ARRAY[v_cost::integer]),
        ids = l.ids[coalesce(width_bucket(v_now - v_longest, l.ats), 0) + 1:]
          || ARRAY[p_id] || ARRAY(SELECT p_id || chr(1) || g FROM generate_series(2, v_cost) AS g),
        expires_at = greatest(l.expires_at, greatest(v_now, l.ats[cardinality(l.ats)]) + v_longest)
        WHERE l.key = v_key;
    END LOOP;
  END IF;
  -- The tightest entry: fewest uses left, ties the longer window, then the first.
  v_best := 0;
  FOR i IN 1 .. n LOOP
    v_left := greatest(0, p_uses[i] - v_counts[i] - CASE WHEN p_mode = 'c' THEN v_kc[i] ELSE 0 END);
    IF v_best = 0 OR v_left < v_best_left OR (v_left = v_best_left AND p_windows[i] > p_windows[v_best]) THEN
      v_best := i;
      v_best_left := v_left;
    END IF;
  END LOOP;
  IF v_best = 0 THEN
    RETURN QUERY SELECT true, 0::bigint, -1::bigint, -1, v_now, 0::bigint, 0::bigint, 0::bigint, 0::bigint;
  ELSIF p_mode = 'c' THEN
    v_at := greatest(v_now, v_maxs[v_best]);
    RETURN QUERY SELECT true, 0::bigint, -1::bigint, -1, v_now, p_uses[v_best], v_best_left,
      coalesce(v_mins[v_best], v_at) + p_windows[v_best] - v_now, v_at + p_windows[v_best] - v_now;
  ELSE
    RETURN QUERY SELECT true, 0::bigint, -1::bigint, -1, v_now, p_uses[v_best], v_best_left,
      coalesce(v_mins[v_best] + p_windows[v_best] - v_now, 0), coalesce(v_maxs[v_best] + p_windows[v_best] - v_now, 0);
  END IF;
END
$fn$;

-- One key's fixed window, atomically: p_cost hits if the window's count plus p_cost is at most p_max,
-- else nothing (a window of p_decay ms opens with p_cost hits when none runs and p_cost <= p_max).
-- {p}_attempt's answer: whether the hits were counted, the count after the call and the ms left.
CREATE OR REPLACE FUNCTION {p}_attempt_n(p_key text, p_max bigint, p_decay bigint, p_cost bigint, p_relaxed boolean)
RETURNS TABLE (counted boolean, hits bigint, ms_left bigint)
LANGUAGE plpgsql AS $fn$
#variable_conflict use_column
DECLARE
  v_now bigint;
  v_hits bigint;
  v_ends bigint;
BEGIN
  IF p_cost IS NULL OR p_cost < 1 THEN
    RAISE EXCEPTION 'ratewindow: an attempt costs at least 1';
  END IF;
  IF p_relaxed THEN
    PERFORM set_config('synchronous_commit', 'off', true);
  END IF;
  -- The lock {p}_window and {p}_attempt take: every operation on the key takes turns.
  PERFORM pg_advisory_xact_lock(hashtextextended(p_key, 1));
  v_now := floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint;
  SELECT w.hits, w.ends_at INTO v_hits, v_ends FROM {p}_windows w WHERE w.key = p_key;
  IF NOT FOUND OR v_ends <= v_now THEN
    IF p_cost > p_max THEN
      RETURN QUERY SELECT false, 0::bigint, 0::bigint;
      RETURN;
    END IF;
    INSERT INTO {p}_windows (key, hits, ends_at) VALUES (p_key, p_cost, v_now + p_decay)
      ON CONFLICT (key) DO UPDATE SET hits = excluded.hits, ends_at = excluded.ends_at;
    RETURN QUERY SELECT true, p_cost, p_decay;
    RETURN;
  END IF;
  IF v_hits::numeric + p_cost > p_max THEN
    RETURN QUERY SELECT false, v_hits, v_ends - v_now;
    RETURN;
  END IF;
  UPDATE {p}_windows w SET hits = w.hits + p_cost WHERE w.key = p_key RETURNING w.hits INTO v_hits;
  RETURN QUERY SELECT true, v_hits, v_ends - v_now;
END
$fn$;
