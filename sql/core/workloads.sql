-- core.workloads: one job or service per node, from every workload file currently loaded. A
-- workload exported again keeps its latest version: the newest file's copy wins whole (ended on
-- every node over still running, the latest end, one sizing its MIG instances, then the latest
-- load), with a row for each node it names, so a multi-node job written once per host holds GPUs
-- on every host. (Keeping one row per id lost all but one node: its hosts' charges went
-- unattributed.) Its phase is, in order: the phase the source states (a phase column or a phase /
-- ml-phase label), else the first phase rule whose conditions all match (phase_rules: one row per
-- condition), else 'unattributed'.
-- `phase_rule` says which. `gpu_cards`: the cards its GPUs are where the source names MIG profiles
-- (a Kubernetes `nvidia.com/mig-1g.10gb`, a Slurm typed gres): a MIG instance its profile's share of
-- the card. NULL where it names none: whole GPUs, or slices it cannot size (MIG's single strategy
-- advertises a slice as nvidia.com/gpu); readers then count gpu_count cards.
CREATE OR REPLACE TABLE core.workloads AS
WITH loaded AS (
    SELECT w.*, f.status = 'replaced' AS replaced
    FROM raw.workloads AS w
    JOIN raw.files AS f
      -- A workload file is a log: a dump written again at its path (a daily sacct export to one
      -- name) keeps the jobs of the one before it (`replaced`); a job both list, as the newer has it.
      ON f.path = w.x_SourceFile AND f.sha256 = w.x_SourceSha256 AND f.status IN ('loaded', 'replaced')
),
versions AS (
    -- Each file's copy of a workload, judged whole: ended on every node it names, its last end, and
    -- whether it sizes its MIG instances (gpu_cards).
    SELECT workload_id, x_SourceFile, x_SourceSha256, x_IngestedAt, any_value(replaced) AS replaced,
           bool_and(ended_at IS NOT NULL) AS ended_everywhere, max(ended_at) AS last_end,
           bool_or(gpu_cards IS NOT NULL) AS sizes_cards
    FROM loaded
    GROUP BY workload_id, x_SourceFile, x_SourceSha256, x_IngestedAt
),
newest_version AS (
    -- Of copies that end alike, one that sizes its MIG instances (under MIG's single strategy, a
    -- `kubectl get pods,nodes` listing beside a pods-only one, which cannot) before the latest
    -- load, so a fresh build, where every file loads at once, picks what a run after a run picks.
    -- Two copies that both size them (a mixed-strategy pod in sevenths without its node's card, in
    -- quarters with it) still go by load, then file name.
    SELECT workload_id, x_SourceFile, x_SourceSha256
    FROM versions
    QUALIFY row_number() OVER (
        PARTITION BY workload_id
        -- A copy in a file's current version over one in a version written over (a corrected dump wins).
        ORDER BY replaced, ended_everywhere DESC, last_end DESC, sizes_cards DESC, x_IngestedAt DESC, x_SourceFile DESC
    ) = 1
),
current AS (
    SELECT w.* EXCLUDE (replaced)
    FROM loaded AS w
    SEMI JOIN newest_version USING (workload_id, x_SourceFile, x_SourceSha256)
    -- A file naming one node twice: its newest line (an ended one over a running one, then the later line).
    QUALIFY row_number() OVER (
        PARTITION BY w.workload_id, w.host
        ORDER BY w.ended_at IS NOT NULL DESC, w.ended_at DESC, w.x_SourceRow DESC
    ) = 1
),
rule_hits AS (
    SELECT w.workload_id, w.host, r.rule_order, any_value(r.rule_name) AS rule_name, any_value(r.phase) AS phase
    FROM current AS w
    CROSS JOIN phase_rules AS r
    GROUP BY w.workload_id, w.host, r.rule_order
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
    SELECT * FROM rule_hits QUALIFY row_number() OVER (PARTITION BY workload_id, host ORDER BY rule_order) = 1
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
LEFT JOIN first_hit AS h ON h.workload_id = w.workload_id AND h.host IS NOT DISTINCT FROM w.host
ORDER BY w.started_at, w.workload_id, w.host;
