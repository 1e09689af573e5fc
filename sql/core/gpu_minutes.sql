-- core.gpu_minutes: one row per GPU (gpu_key) per UTC minute that telemetry covers, built from
-- time-weighted samples, so the same activity gives the same minutes at any sampling interval.
--
-- A sample stands for the time until the next sample of the same GPU from the same source (its
-- series), as long as that gap is within the series' staleness bound:
--     bound = least($telemetry_gap_factor × the series' median interval, $telemetry_max_gap_s),
-- the median taken over the sample's UTC hour where that hour has five gaps or more, else over its day
-- (a cadence that changes within a day keeps each part's own).
-- A longer gap is missing, never zero: the sample before it (and a series' last sample) stands for
-- one median interval only (at most $telemetry_max_gap_s), and the rest of the gap has no row. A
-- series of one sample stands for one minute. A 300 s sample therefore covers five minutes, six
-- 10 s samples cover one.
--
-- Per minute: busy_fraction is the time-weighted mean of the best busy signal covering the minute
-- ($util_kinds, best first; never a blend of kinds), NULL when no covering sample carried one;
-- coverage is the share of the minute (0–1) that signal covers; samples counts the samples whose
-- span overlaps the minute (all sources), busy_samples those of the chosen signal. Busy GPU-minutes
-- of a minute = busy_fraction × coverage. Memory and power are time-weighted means.
-- gpu_share is the part of a physical card the key stands for in the minute: 1 for a whole GPU; for
-- a MIG instance its profile's compute slices over the card's (mig_card_slices: '3g.40gb' on an
-- A100 is 3/7), and for instances without a profile an equal part of what the profiled ones leave
-- of the card that minute. GPU-equivalents (busy GPUs, idle GPU-hours) are busy_fraction ×
-- coverage × gpu_share, so seven idle slices of one card are one idle GPU, not seven.
-- gpu_model is the canonical key shared with billing (x_GpuModel) and core.price_catalog
-- (gpu_model_key, models/data/gpu_models.csv); gpu_model_name keeps the telemetry's own text;
-- gpu_model_known is false for a name the table does not know (then gpu_model is that text).
--
-- Built per UTC day ($minute_days: YYYY-MM-DD days; ['*'] builds every day), so a new day of
-- telemetry rebuilds its own minutes and its neighbours' (whose edge spans reach into it), not the
-- history. A day is rolled up from its own samples and those within $telemetry_max_gap_s of its
-- edges (no span is longer, so no sample further away changes a minute of it), and keeps only its
-- own minutes: a day built alone is that day of a whole build. A series' median interval is taken
-- over that window.
CREATE OR REPLACE TABLE core.gpu_minutes AS
WITH samples AS NOT MATERIALIZED (
    -- Read twice (the names below, the rollup): each scans the table, with no copy of the rows kept.
    SELECT gpu_key, source, ts, host, gpu_index, gpu_uuid, gpu_model, mig_instance, mig_profile, pod, namespace,
           util_pct, util_kind, mem_used_mib, power_w,
           epoch_us(ts) AS t0_us
    FROM core.gpu_samples
    -- The days asked for and $telemetry_max_gap_s either side (no span reaches further over
    -- midnight): first as whole days, a range DuckDB's scan of the table prunes by, then exactly.
    WHERE list_contains($minute_days, '*') OR list_contains($minute_days, 'unknown')
       OR (ts >= first_listed_day($minute_days) - 1 AND ts < last_listed_day($minute_days) + 2
           AND epoch_us(ts) >= epoch_us(CAST(first_listed_day($minute_days) AS TIMESTAMP)) - $telemetry_max_gap_s * 1000000
           AND epoch_us(ts) < epoch_us(CAST(last_listed_day($minute_days) + 1 AS TIMESTAMP)) + $telemetry_max_gap_s * 1000000)
),
windows AS (
    -- Each sample in its own UTC day's window (day_no: days since 1970-01-01); one within
    -- $telemetry_max_gap_s of midnight also in the neighbouring day's.
    SELECT s.*, s.t0_us // 86400000000 + o.shift AS day_no
    FROM samples AS s, (VALUES (-1), (0), (1)) AS o(shift)
    WHERE in_day_window(s.t0_us, o.shift, $telemetry_max_gap_s)
),
wanted AS (
    -- A list without gaps is a range of day numbers; only a list with gaps formats each row's day.
    SELECT * FROM windows
    WHERE list_contains($minute_days, '*')
       OR (days_without_gap($minute_days)
           AND day_no >= date_diff('day', DATE '1970-01-01', first_listed_day($minute_days))
           AND day_no <= date_diff('day', DATE '1970-01-01', last_listed_day($minute_days)))
       OR list_contains($minute_days, strftime(DATE '1970-01-01' + CAST(day_no AS INTEGER), '%Y-%m-%d'))
),
names AS (
    -- What names a GPU (host, index, uuid, model, MIG instance): once per GPU, not carried through
    -- the window below, which sorts every column it carries (15-20 % of the rollup at 2M samples).
    -- Host, uuid or index and MIG instance make the key, so they are one per GPU; where its samples
    -- differ on the others (a model's name spelled two ways), the smallest is taken.
    -- gpu_no numbers the GPUs for the window and the groupings below: a number instead of the key's
    -- text (host/uuid, ~30 bytes kept outside the row) takes a run's peak memory down by ~80 MB at
    -- 2M samples (the window holds every row it sorts), in the same time.
    SELECT gpu_key, row_number() OVER (ORDER BY gpu_key) AS gpu_no,
           min(host) AS host, min(gpu_index) AS gpu_index, min(gpu_uuid) AS gpu_uuid,
           min(gpu_model) AS gpu_model, min(mig_instance) AS mig_instance
    FROM samples
    GROUP BY gpu_key
),
kinds AS (
    -- Each busy signal's kind once, numbered: the window and the groupings below carry its number,
    -- not its name (13-26 characters, which DuckDB keeps outside the row past 12: 90-100 MB of a
    -- 2M-sample run's peak), and the name comes back at the end. Numbered best first ($util_kinds'
    -- order, then other kinds by name), so the number is also the rank the minutes choose by.
    SELECT util_kind, row_number() OVER (ORDER BY coalesce(list_position($util_kinds, util_kind), 99), util_kind) AS kind_no
    FROM (SELECT DISTINCT util_kind FROM samples WHERE util_kind IS NOT NULL)
),
mig_days AS (
    -- Each MIG instance (by gpu_no) in each day's window (as `windows` gives them, so a span reaching
    -- past midnight finds its row): its card, numbered, the card's compute slices, and the slices
    -- its profile names ('1g.10gb' → 1; the GPU instance's 'Ng' in '1c.3g.40gb'), NULL without
    -- one. The profile its own day's samples give, where it has any: an instance id reused at
    -- midnight with another profile (or none) is not given the day before's from the window's edge.
    SELECT day_no, gpu_no, dense_rank() OVER (ORDER BY card_key) AS card_no,
           mig_card_slices(gpu_model_key(any_value(gpu_model))) AS card_slices,
           CASE WHEN bool_or(own_day) THEN max(slices) FILTER (WHERE own_day) ELSE max(slices) END AS profile_slices
    FROM (SELECT w.day_no, n.gpu_no, n.gpu_model, w.t0_us // 86400000000 = w.day_no AS own_day,
                 mig_card_key(w.gpu_key, w.mig_instance) AS card_key,
                 try_cast(regexp_extract(w.mig_profile, '(\d+)g\.', 1) AS INTEGER) AS slices
          -- The windows above for MIG samples alone, from the table (a filter on `windows` itself is not
          -- pushed into the scan: 0.2-0.3 s more at 3.5M samples without one MIG instance).
          FROM (SELECT s.*, s.t0_us // 86400000000 + o.shift AS day_no
                FROM samples AS s, (VALUES (-1), (0), (1)) AS o(shift)
                WHERE s.mig_instance IS NOT NULL AND in_day_window(s.t0_us, o.shift, $telemetry_max_gap_s)) AS w
          JOIN names AS n USING (gpu_key))
    GROUP BY day_no, gpu_no, card_key  -- (one card per instance)
),
model_keys AS (
    -- Each distinct telemetry name is looked up once (the regexes per row would cost more than the rollup).
    SELECT map_from_entries(list((name, gpu_model_key(name)))) AS keys
    FROM (SELECT DISTINCT gpu_model AS name FROM names WHERE gpu_model IS NOT NULL)
),
steps AS (
    SELECT day_no, gpu_no, source, t0_us, t0_us // 3600000000 AS hour_no, pod, namespace, util_pct, k.kind_no, mem_used_mib, power_w,
           (lead(t0_us) OVER series) - t0_us AS gap_us
    FROM wanted AS w JOIN names AS n USING (gpu_key)
    LEFT JOIN kinds AS k ON k.util_kind = w.util_kind
    WINDOW series AS (PARTITION BY day_no, gpu_no, source ORDER BY t0_us)
),
hour_medians AS (
    -- A series' cadence hour by hour, where the hour has enough gaps to say (a median of five or
    -- more outlasts an outage among them), else its day's: sampling that changes within a day
    -- (every 60 s until noon, every 5 s after) keeps each part's own cadence, where the day's
    -- median (5 s) cut every morning sample to 5 s of its 60 s span.
    SELECT day_no, gpu_no, source, hour_no, count(gap_us) AS gaps, median(gap_us) AS hour_median_us
    FROM steps GROUP BY ALL
),
day_medians AS (
    SELECT day_no, gpu_no, source, median(gap_us) AS day_median_us FROM steps GROUP BY ALL
),
medians AS (
    SELECT h.day_no, h.gpu_no, h.source, h.hour_no,
           coalesce(CASE WHEN h.gaps >= 5 THEN h.hour_median_us END, d.day_median_us, 60000000) AS median_us
    FROM hour_medians AS h JOIN day_medians AS d USING (day_no, gpu_no, source)
),
cadence AS (
    SELECT * FROM steps JOIN medians USING (day_no, gpu_no, source, hour_no)
),
spans AS (
    SELECT * EXCLUDE (gap_us, median_us, hour_no),
           t0_us + CASE
               WHEN gap_us <= least($telemetry_gap_factor * median_us, $telemetry_max_gap_s * 1000000) THEN gap_us
               ELSE least(median_us, $telemetry_max_gap_s * 1000000)
           END::BIGINT AS t1_us
    FROM cadence
),
exploded AS (
    -- Most samples lie within one minute; a longer span is cut at each minute boundary.
    SELECT *, unnest(range(t0_us // 60000000, (t1_us - 1) // 60000000 + 1)) AS minute_no
    FROM spans
),
pieces AS (
    -- A window keeps its own day's minutes (a neighbour's samples are there for their spans).
    SELECT *, least(t1_us, (minute_no + 1) * 60000000) - greatest(t0_us, minute_no * 60000000) AS overlap_us
    FROM exploded
    WHERE minute_no // 1440 = day_no
),
per_kind AS (
    SELECT gpu_no, minute_no, kind_no,
           -- The pod (and its namespace, from the same sample) the minute's last labelled sample
           -- names: in a minute when the GPU passes from one pod to another, the one it went to,
           -- never one's name with the other's namespace, and the same on every build and engine.
           arg_max({'pod': pod, 'namespace': namespace}, t0_us) FILTER (WHERE pod IS NOT NULL) AS pod_label,
           count(*) AS samples,
           sum(overlap_us) AS covered_us,
           sum(util_pct * overlap_us) / sum(overlap_us) / 100.0 AS busy_fraction,
           sum(mem_used_mib * overlap_us) AS mem_weighted, sum(overlap_us) FILTER (WHERE mem_used_mib IS NOT NULL) AS mem_us,
           max(mem_used_mib) AS mem_used_mib_max,
           sum(power_w * overlap_us) AS power_weighted, sum(overlap_us) FILTER (WHERE power_w IS NOT NULL) AS power_us
    FROM pieces
    GROUP BY gpu_no, minute_no, kind_no
),
per_minute AS (
    SELECT
        gpu_no, minute_no, arg_min(pod_label, coalesce(kind_no, 2147483647)) FILTER (WHERE pod_label IS NOT NULL) AS pod_label,
        sum(samples) AS samples,
        coalesce(arg_min(samples, kind_no) FILTER (WHERE kind_no IS NOT NULL), 0) AS busy_samples,
        min(kind_no) AS kind_no,
        arg_min(busy_fraction, kind_no) FILTER (WHERE kind_no IS NOT NULL) AS busy_fraction,
        -- A minute with no busy signal (memory or power only, utilization [N/A]) covers nothing: least()
        -- skips a NULL, so the NULL is made 0 first (least(1.0, NULL) is 1.0 on DuckDB and Spark alike).
        least(1.0, coalesce(arg_min(covered_us, kind_no) FILTER (WHERE kind_no IS NOT NULL) / 60000000.0, 0)) AS coverage,
        sum(mem_weighted) / sum(mem_us) AS mem_used_mib, max(mem_used_mib_max) AS mem_used_mib_max,
        sum(power_weighted) / sum(power_us) AS power_w
    FROM per_kind
    GROUP BY gpu_no, minute_no
),
minutes AS (
    SELECT m.*, d.card_no, d.card_slices, d.profile_slices
    FROM per_minute AS m
    LEFT JOIN mig_days AS d ON d.gpu_no = m.gpu_no AND d.day_no = m.minute_no // 1440
),
card_minutes AS (
    -- Per MIG card and minute: its instances' profile slices, and how many reported without a profile.
    SELECT card_no, minute_no, sum(profile_slices) AS profiled_slices,
           count(*) FILTER (WHERE profile_slices IS NULL) AS unprofiled
    FROM minutes
    WHERE card_no IS NOT NULL
    GROUP BY card_no, minute_no
)
SELECT
    n.host, n.gpu_key, n.gpu_index, n.gpu_uuid, n.mig_instance, to_timestamp(m.minute_no * 60) AS minute,
    (SELECT keys FROM model_keys)[n.gpu_model] AS gpu_model, m.pod_label.pod AS pod, m.pod_label.namespace AS namespace,
    m.samples, m.busy_samples, k.util_kind, m.busy_fraction, m.coverage, m.mem_used_mib, m.mem_used_mib_max, m.power_w,
    n.gpu_model AS gpu_model_name,
    gpu_model_known((SELECT keys FROM model_keys)[n.gpu_model]) AS gpu_model_known,
    -- The card's instances reporting in the minute share it: a profile's slices over the card's (over
    -- all the profiles' slices where they add up to more), and instances without a profile what the
    -- profiled ones leave, in equal parts. A card's shares in a minute never add up to more than 1.
    CASE WHEN m.card_no IS NULL THEN 1.0
         WHEN m.profile_slices IS NOT NULL THEN m.profile_slices / greatest(m.card_slices, c.profiled_slices)
         ELSE greatest(0.0, 1.0 - coalesce(c.profiled_slices, 0) / m.card_slices) / c.unprofiled
    END AS gpu_share
FROM minutes AS m
JOIN names AS n ON n.gpu_no = m.gpu_no
LEFT JOIN kinds AS k ON k.kind_no = m.kind_no
LEFT JOIN card_minutes AS c ON c.card_no = m.card_no AND c.minute_no = m.minute_no;
