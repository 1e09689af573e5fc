-- findings.anomalies: one row per anomaly episode, kept across runs (never rebuilt, never
-- deleted). Each run re-scores the last 30 days and merges (anomaly_updates, from
-- pipelines/analysis/anomalies.py): an episode that continues keeps its anomaly_id; one that vanished
-- because its bill was restated becomes status 'resolved' with resolution 'restated'.
--   status: open (still anomalous on the last scored day) | resolved
--   resolution: back_to_normal (resolved_on: the first normal day) | restated | no_data (the
--   series stopped being billed while open)
--   kind: new | removed | changed spend; direction: up | down
--   metric: cost (reporting currency) | gpu_hours | egress_gb; unit names it.
--   actual / expected / change: on the peak day; impact: Σ(actual − expected) over the episode.
--   driver: for cost, whether usage, price (cost per unit of usage) or both moved.
CREATE TABLE IF NOT EXISTS findings.anomalies (
    anomaly_id VARCHAR PRIMARY KEY,
    status VARCHAR NOT NULL,
    resolution VARCHAR,
    metric VARCHAR NOT NULL,
    unit VARCHAR,
    provider VARCHAR, sub_account VARCHAR, service VARCHAR, phase VARCHAR,
    kind VARCHAR, direction VARCHAR,
    first_day DATE, last_day DATE, days INTEGER, peak_day DATE, resolved_on DATE,
    actual DECIMAL(38, 10), expected DECIMAL(38, 10), change DECIMAL(38, 10), impact DECIMAL(38, 10),
    z DOUBLE,
    baseline_method VARCHAR, baseline_points INTEGER,
    driver VARCHAR,
    summary VARCHAR,
    explanation JSON,
    first_detected_at TIMESTAMPTZ, resolved_at TIMESTAMPTZ, last_scored_at TIMESTAMPTZ,
    daily JSON  -- the alerted days: [{day, actual, expected (micro-units), z, baseline_method, baseline_points}]
);
-- Warehouses from before `daily` was kept gain it (empty for their rows).
ALTER TABLE findings.anomalies ADD COLUMN IF NOT EXISTS daily JSON;
-- merge: this run's updates replace their stored rows; other rows stay as they are.
DELETE FROM findings.anomalies WHERE anomaly_id IN (SELECT anomaly_id FROM anomaly_updates);
INSERT INTO findings.anomalies BY NAME
SELECT anomaly_id, status, resolution, metric, unit, provider, sub_account, service, phase, kind, direction,
       first_day, last_day, days, peak_day, resolved_on,
       CAST(actual AS DECIMAL(38, 10)) AS actual, CAST(expected AS DECIMAL(38, 10)) AS expected,
       CAST(change AS DECIMAL(38, 10)) AS change, CAST(impact AS DECIMAL(38, 10)) AS impact,
       z, baseline_method, baseline_points, driver, summary, CAST(explanation AS JSON) AS explanation,
       first_detected_at, resolved_at, last_scored_at, CAST(daily AS JSON) AS daily
FROM anomaly_updates;
