-- core.workloads: one job or service, from every workload file currently loaded. A workload
-- exported again keeps its latest version. Its phase is, in order: the phase the source states
-- (a phase column or a phase / ml-phase label), else the first phase rule whose conditions all
-- match (phase_rules: one row per condition), else 'unattributed'. `phase_rule` says which.
CREATE OR REPLACE TABLE core.workloads AS
WITH current AS (
    SELECT w.*
    FROM raw.workloads AS w
    JOIN raw.files AS f
      ON f.path = w.x_SourceFile AND f.sha256 = w.x_SourceSha256 AND f.status = 'loaded'
    -- The newest state wins: an ended copy over a still-running one, the latest end, then the
    -- latest load (files of one run share their load time).
    QUALIFY row_number() OVER (
        PARTITION BY w.workload_id
        ORDER BY w.ended_at IS NOT NULL DESC, w.ended_at DESC, w.x_IngestedAt DESC, w.x_SourceFile DESC, w.x_SourceRow DESC
    ) = 1
),
rule_hits AS (
    SELECT w.workload_id, r.rule_order, any_value(r.rule_name) AS rule_name, any_value(r.phase) AS phase
    FROM current AS w
    CROSS JOIN phase_rules AS r
    GROUP BY w.workload_id, r.rule_order
    HAVING bool_and(coalesce(regexp_matches(
        CASE r.field
            WHEN 'name' THEN coalesce(w.name, w.workload_id)
            WHEN 'account' THEN w.account
            WHEN 'partition' THEN w.partition
            WHEN 'namespace' THEN w.namespace
            WHEN 'label' THEN json_extract_string(w.labels, '$."' || r.label_key || '"')
        END, r.pattern), false))
),
first_hit AS (
    SELECT * FROM rule_hits QUALIFY row_number() OVER (PARTITION BY workload_id ORDER BY rule_order) = 1
)
SELECT
    w.* EXCLUDE (phase),
    coalesce(w.phase, h.phase, 'unattributed') AS phase,
    CASE
        WHEN w.phase IS NOT NULL THEN 'explicit (' || w.source || ')'
        WHEN h.phase IS NOT NULL THEN 'rule ' || h.rule_order || ': ' || h.rule_name
        ELSE 'no rule matched'
    END AS phase_rule
FROM current AS w
LEFT JOIN first_hit AS h USING (workload_id)
ORDER BY w.started_at, w.workload_id;
