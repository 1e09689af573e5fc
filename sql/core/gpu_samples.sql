-- core.gpu_samples: one GPU (or MIG instance) at one instant, from every telemetry file loaded
-- (and the earlier versions of a file written again at its path).
-- Sources that export one metric per series (Prometheus) arrive as partial rows: rows of the same
-- GPU and instant merge into one, and the same sample exported twice counts once. Where several
-- busy signals exist at one instant, the best kind ($util_kinds, best first) is kept.
-- Where the rows of one GPU and instant give a column different values (two files logging the same
-- card), the row first by source file path, then by row within its file, gives it (the busy signal:
-- the best kind first, then that order); a NULL never wins over a value. So the merged row is the
-- same whatever order the files were loaded in, and whichever days a run rebuilds.
-- gpu_key identifies a GPU across sources: host / uuid (or index) / MIG instance.
-- Most samples are alone at their instant (an nvidia-smi or DCGM row holds every metric): they
-- pass through as they are, and only the instants seen twice go through the merge (aggregating
-- every row took 3× as long on 2M samples).
-- A source that names GPUs by index only (nvidia-smi dmon) keys its samples by the uuid another
-- source on the same host gives that index that UTC day (nvidia-smi --query-gpu, DCGM), when it gives
-- exactly one: both sources of one card are one GPU, not two (measured on an H200 logging both).
-- Without such a source, or with two uuids for one index that day (a card swapped), the key stays
-- host/gpu<index>.
-- `loaded` is read five times; NOT MATERIALIZED has each reader scan the lake again instead of
-- DuckDB keeping a copy of every row in memory: half the peak memory at 3.5M samples (1.27 →
-- 0.70 GB), the same time.
CREATE OR REPLACE TABLE core.gpu_samples AS
WITH loaded AS NOT MATERIALIZED (
    SELECT s.*, epoch_us(s.ts) // 86400000000 AS day_no
    FROM raw.gpu_samples AS s
    JOIN raw.files AS f
      -- A telemetry file is a log: a version written again at its path (nvidia-smi restarted with -f)
      -- keeps the samples of the one before it (`replaced`); at an instant both give, the newer wins.
      ON f.path = s.x_SourceFile AND f.sha256 = s.x_SourceSha256 AND f.status IN ('loaded', 'replaced')
    -- $sample_days: the UTC days to build (the lake's day folders, YYYY-MM-DD; 'unknown': no
    -- timestamp); ['*'] builds every day. Days are tested as a range DuckDB pushes into the Parquet
    -- scan, which then skips every other day's files; a day's text is formatted per sample only
    -- when the list has gaps (formatting every sample of the history made a day cost O(history)).
    WHERE list_contains($sample_days, '*')
       OR (list_contains($sample_days, 'unknown')
           AND list_contains($sample_days, coalesce(strftime(s.ts, '%Y-%m-%d'), 'unknown')))
       OR (s.ts >= first_listed_day($sample_days) AND s.ts < last_listed_day($sample_days) + 1
           AND (days_without_gap($sample_days) OR list_contains($sample_days, strftime(s.ts, '%Y-%m-%d'))))
),
index_only AS (
    SELECT DISTINCT host, gpu_index, day_no FROM loaded
    WHERE gpu_uuid IS NULL AND gpu_index IS NOT NULL AND day_no IS NOT NULL
),
uuid_of_index AS (
    -- host/index/day number → the one uuid other sources give it, for the indexes some source gives
    -- without one (usually none: then nothing is grouped); looked up only for samples without a uuid.
    SELECT map_from_entries(list((index_key, uuid))) AS uuids
    FROM (
        SELECT host || '/' || gpu_index::VARCHAR || '/' || day_no::VARCHAR AS index_key, min(gpu_uuid) AS uuid
        FROM loaded SEMI JOIN index_only USING (host, gpu_index, day_no)
        WHERE gpu_uuid IS NOT NULL
        GROUP BY host, gpu_index, day_no
        HAVING count(DISTINCT gpu_uuid) = 1
    )
),
current AS NOT MATERIALIZED (
    SELECT s.* EXCLUDE (day_no),
           s.host || '/' || coalesce(
               s.gpu_uuid,
               (SELECT uuids FROM uuid_of_index)[s.host || '/' || s.gpu_index::VARCHAR || '/' || s.day_no::VARCHAR],
               'gpu' || s.gpu_index::VARCHAR, 'gpu?')
               || coalesce('/mig' || s.mig_instance, '') AS gpu_key,
           coalesce(list_position($util_kinds, s.util_kind), 99) AS kind_rank
    FROM loaded AS s
),
seen_twice AS (
    SELECT gpu_key, ts FROM current GROUP BY gpu_key, ts HAVING count(*) > 1
),
file_order AS (
    -- Each loaded file version's place by path: a row's place in the merge is
    -- file_no × 2^40 + x_SourceRow, one integer (a struct of path and row took twice as long to compare);
    -- the busy signal's kind goes above it at 2^80.
    -- The merge costs more than any_value did (2.4M rows, every instant seen twice: 5.7 → 8.3 s on one
    -- thread); the samples alone at their instant never reach it.
    -- Versions of one path: the one it holds now first, then the older ones, newest first.
    SELECT path AS x_SourceFile, sha256 AS x_SourceSha256,
           row_number() OVER (ORDER BY path, status = 'replaced', ingested_at DESC, sha256) AS file_no
    FROM raw.files WHERE status IN ('loaded', 'replaced')
),
merging AS (
    -- Only the rows of the instants seen twice: the others never meet file_order.
    SELECT c.*, o.file_no::HUGEINT * 1099511627776 + coalesce(c.x_SourceRow, 0) AS merge_order  -- HUGEINT: millions of files a year
    FROM current AS c
    SEMI JOIN seen_twice USING (gpu_key, ts)
    JOIN file_order AS o USING (x_SourceFile, x_SourceSha256)
)
SELECT
    ts, host, gpu_key, gpu_uuid, gpu_index, gpu_model, mig_instance, mig_profile, pod, namespace, container,
    util_pct,
    CASE WHEN util_pct IS NOT NULL THEN util_kind END AS util_kind,
    sm_active, mem_used_mib, mem_total_mib, power_w, energy_mj, temperature_c, source, x_SourceFile, x_IngestedAt
FROM current
ANTI JOIN seen_twice USING (gpu_key, ts)
UNION ALL
SELECT
    ts,
    arg_min(host, merge_order) AS host,
    gpu_key,
    arg_min(gpu_uuid, merge_order) FILTER (WHERE gpu_uuid IS NOT NULL) AS gpu_uuid,
    arg_min(gpu_index, merge_order) FILTER (WHERE gpu_index IS NOT NULL) AS gpu_index,
    arg_min(gpu_model, merge_order) FILTER (WHERE gpu_model IS NOT NULL) AS gpu_model,
    arg_min(mig_instance, merge_order) FILTER (WHERE mig_instance IS NOT NULL) AS mig_instance,
    arg_min(mig_profile, merge_order) FILTER (WHERE mig_profile IS NOT NULL) AS mig_profile,
    -- A pod, its namespace and its container come from one row, the first naming a pod: never one
    -- row's pod with another's namespace (a series without a namespace label beside another pod's).
    -- Only where no row names a pod are the namespace and container taken as the other columns are.
    (arg_min({'pod': pod, 'namespace': namespace, 'container': container}, merge_order) FILTER (WHERE pod IS NOT NULL)).pod AS pod,
    coalesce((arg_min({'pod': pod, 'namespace': namespace, 'container': container}, merge_order) FILTER (WHERE pod IS NOT NULL)).namespace,
             CASE WHEN count(pod) = 0 THEN arg_min(namespace, merge_order) FILTER (WHERE namespace IS NOT NULL) END) AS namespace,
    coalesce((arg_min({'pod': pod, 'namespace': namespace, 'container': container}, merge_order) FILTER (WHERE pod IS NOT NULL)).container,
             CASE WHEN count(pod) = 0 THEN arg_min(container, merge_order) FILTER (WHERE container IS NOT NULL) END) AS container,
    -- arg_min skips the rows whose value is NULL: a partial row's missing metric never wins. The
    -- busy signal's order puts its kind above the row's place, in one HUGEINT (a struct took 20 % longer).
    arg_min(util_pct, kind_rank::HUGEINT * 1208925819614629174706176 + merge_order) FILTER (WHERE util_pct IS NOT NULL) AS util_pct,
    arg_min(util_kind, kind_rank::HUGEINT * 1208925819614629174706176 + merge_order) FILTER (WHERE util_pct IS NOT NULL) AS util_kind,
    arg_min(sm_active, merge_order) FILTER (WHERE sm_active IS NOT NULL) AS sm_active,
    arg_min(mem_used_mib, merge_order) FILTER (WHERE mem_used_mib IS NOT NULL) AS mem_used_mib,
    arg_min(mem_total_mib, merge_order) FILTER (WHERE mem_total_mib IS NOT NULL) AS mem_total_mib,
    arg_min(power_w, merge_order) FILTER (WHERE power_w IS NOT NULL) AS power_w,
    arg_min(energy_mj, merge_order) FILTER (WHERE energy_mj IS NOT NULL) AS energy_mj,
    arg_min(temperature_c, merge_order) FILTER (WHERE temperature_c IS NOT NULL) AS temperature_c,
    min(source) AS source,
    arg_min(x_SourceFile, merge_order) AS x_SourceFile,
    arg_min(x_IngestedAt, merge_order) AS x_IngestedAt
FROM merging
GROUP BY gpu_key, ts;
