-- marts.gpu_busy_by_workload_hour: busy GPU-minutes per UTC hour, host and workload, from
-- core.gpu_minutes (busy fraction × coverage, so the same at any sampling interval). The busy side
-- of marts.spend_by_phase and marts.gpu_hours_profile, which add these rows up instead of joining
-- every minute of the history to the workloads. (A host's hour whole, never split, is
-- marts.gpu_busy_by_host_hour.)
-- A busy minute on a host counts for the workloads holding GPUs there, split by the cards they hold
-- (core.workloads.gpu_cards: a MIG instance as its share of the card; phase: the workload's), each
-- for the part of the minute it ran (a job of 30 s holds its cards for half a minute, as the charges
-- pay its seconds, not the whole minute nor none of it). Where
-- they hold fewer cards than the host's GPUs' telemetry covers, they are taken to hold the busiest
-- GPUs (as marts.cost_attribution takes the busy GPUs beyond the cards held to be no workload's:
-- its busy_telemetry part), and the rest counts as no workload's ('unattributed', or 'idle' under
-- the busy threshold), so no workload is busier than its cards; with
-- no workload on the host, a GPU-minute at or over $idle_busy_threshold counts as 'unattributed'
-- (something ran that no workload record names) and one under it as 'idle'
-- (workload_id NULL). A minute when only workloads holding no GPUs ran counts for no phase
-- (workload_id and phase NULL).
-- Where the GPU's telemetry names the pod using it (dcgm-exporter's pod and namespace labels, on
-- Kubernetes) and that pod is one of the workloads holding GPUs there, the GPU's minute is that
-- pod's alone: a busy and an idle pod on one node are each their own, not both half busy. On such
-- a host the GPUs no label gives to a holder go to the cards each holder has left once its named
-- GPUs are counted, the busiest first (a pod named on its one GPU takes no part of its
-- neighbour's), never more than it has left, and a pod takes of the GPUs named its own no more
-- than the cards it holds; what no holder takes counts as if no workload held it. Where a label
-- names a holder, a GPU whose label names a pod no record holds there ran that pod: no holder takes
-- it, and its minute counts as no workload's (a pod listing taken after the pod ended does not hold
-- it); where no label names a holder, labels are as none.
--
-- Built per UTC day ($busy_days: YYYY-MM-DD days; ['*'] builds every day): the days
-- core.gpu_minutes rebuilt, and the days whose workloads changed (a day's fingerprint covers the
-- workloads overlapping it), so a new day of telemetry adds its own rows, not the history's.
CREATE OR REPLACE TABLE marts.gpu_busy_by_workload_hour AS
WITH minutes AS NOT MATERIALIZED (
    SELECT m.gpu_key, m.host, m.minute, m.busy_fraction * m.coverage * m.gpu_share AS busy, m.busy_fraction, m.gpu_share,
           -- The card-minutes the GPU's telemetry covers: what holders of cards can hold of it.
           m.coverage * m.gpu_share AS covered_cards,
           m.pod, m.namespace
    FROM core.gpu_minutes AS m
    -- The days asked for: a range DuckDB prunes the table's row groups by (macros.sql).
    WHERE in_listed_days(m.minute, $busy_days)
),
labelled AS (
    -- The host-minutes where the telemetry names a pod on some GPU: only those take the pod rules
    -- below (their windows doubled this model's time on a fleet without labels).
    SELECT DISTINCT host, minute FROM minutes WHERE pod IS NOT NULL
),
plain_minutes AS (
    SELECT m.* FROM minutes AS m
    WHERE NOT EXISTS (SELECT 1 FROM labelled AS l WHERE l.host = m.host AND l.minute = m.minute)
),
plain_holders AS (
    -- Elsewhere: per host-minute, the cards its GPUs' telemetry covers, and each workload holding
    -- GPUs there with the cards it holds and all the holders' cards.
    SELECT *, sum(cards) OVER (PARTITION BY host, minute) AS held_cards
    FROM (SELECT h.host, h.minute, h.host_cards, w.workload_id, w.phase,
                 workload_cards(w.gpu_cards, w.gpu_count) * held_in_minute(w.started_at, w.ended_at, h.minute) AS cards
          FROM (SELECT host, minute, sum(covered_cards) AS host_cards FROM plain_minutes GROUP BY host, minute) AS h
          JOIN core.workloads AS w
            ON w.host = h.host AND holds_minute(w.started_at, w.ended_at, h.minute)
          WHERE w.gpu_count > 0)
),
plain_portions AS (
    -- Where the holders hold fewer cards than the host's GPUs' telemetry covers, which GPUs they
    -- hold is not recorded: they are taken to hold the busiest (as marts.cost_attribution counts the
    -- busy GPUs beyond those held as no workload's), each GPU's `portion` held, 0-1, the busiest
    -- first, in covered card-minutes (a GPU seen half the minute takes half a card of theirs).
    SELECT m.gpu_key, m.minute,
           held_portion(s.held_cards, sum(m.covered_cards) OVER (
               PARTITION BY m.host, m.minute ORDER BY m.busy_fraction DESC NULLS LAST, m.gpu_key) - m.covered_cards,
               m.covered_cards) AS portion
    FROM plain_minutes AS m
    JOIN (SELECT host, minute, any_value(held_cards) AS held_cards FROM plain_holders
          WHERE round(host_cards - held_cards, 9) > 0 GROUP BY host, minute) AS s
      ON s.host = m.host AND s.minute = m.minute
),
plain_held AS (
    -- The part of each GPU-minute the holders hold (all of it where they hold the host's cards),
    -- split between them by the cards they hold.
    SELECT m.host, m.minute, m.busy * coalesce(q.portion, 1) * p.cards / p.held_cards AS busy, p.workload_id, p.phase
    FROM plain_minutes AS m
    JOIN plain_holders AS p ON p.host = m.host AND p.minute = m.minute
    LEFT JOIN plain_portions AS q ON q.gpu_key = m.gpu_key AND q.minute = m.minute
),
plain_unclaimed AS (
    -- The rest of a GPU-minute the holders do not hold: no workload record names what ran on it
    -- (unattributed, or idle under the busy threshold).
    SELECT m.host, m.minute, m.busy * (1 - q.portion) AS busy, NULL AS workload_id,
           CASE WHEN m.busy_fraction >= $idle_busy_threshold THEN 'unattributed' ELSE 'idle' END AS phase
    FROM plain_minutes AS m
    JOIN plain_portions AS q ON q.gpu_key = m.gpu_key AND q.minute = m.minute
    WHERE q.portion < 1
),
holders AS (
    -- On a labelled host-minute: the workloads holding GPUs, with the cards they hold; `named`: the
    -- workload is the pod the GPU's telemetry names for that minute.
    SELECT m.gpu_key, m.host, m.minute, m.busy, m.busy_fraction, m.gpu_share, m.covered_cards, w.workload_id, w.phase,
           workload_cards(w.gpu_cards, w.gpu_count) * held_in_minute(w.started_at, w.ended_at, m.minute) AS cards,
           coalesce(m.pod = w.name AND m.namespace = w.namespace, false) AS named, m.pod IS NOT NULL AS labelled_gpu
    FROM minutes AS m
    SEMI JOIN labelled AS l ON l.host = m.host AND l.minute = m.minute
    JOIN core.workloads AS w
      ON w.host = m.host AND holds_minute(w.started_at, w.ended_at, m.minute)
    WHERE w.gpu_count > 0
),
gpu_names AS (
    -- Per GPU-minute: the cards of the holders its label names (two records naming one pod share it
    -- by cards), and how many holders the host has (every holder is a row of each of its GPU-minutes).
    SELECT *, sum(CASE WHEN named THEN cards ELSE 0 END) OVER (PARTITION BY gpu_key, minute) AS named_cards,
           count(*) OVER (PARTITION BY gpu_key, minute) AS holders_on_host
    FROM holders
),
named_on AS (
    -- The cards of the GPUs the telemetry names each holder on in that minute: its part of each
    -- (their shares of a card).
    SELECT *, sum(CASE WHEN named THEN gpu_share * cards / named_cards ELSE 0 END)
                  OVER (PARTITION BY host, minute, workload_id) AS named_on_cards
    FROM gpu_names
),
claims AS (
    -- Each holder's cards left for the GPUs no label names: those it holds less those named its own,
    -- to 9 decimals (sevenths summed in another order must not leave a crumb that would take a
    -- whole GPU's minute); all of them where none is named its own.
    -- `named_cap`: the part of its named GPUs a holder takes, all of them unless they are more cards
    -- than it holds (a slice the telemetry sizes 1/4 named to a pod recorded at 1/7): never more
    -- than its cards, the rest is open to the holders' cards left (host_labels).
    SELECT *, CASE WHEN named_on_cards = 0 THEN cards ELSE greatest(round(cards - named_on_cards, 9), 0) END AS cards_left,
           CASE WHEN round(named_on_cards - cards, 9) > 0 THEN cards / named_on_cards ELSE 1 END AS named_cap
    FROM named_on
),
shares AS (
    -- Per GPU-minute: all holders' cards left, and the part of it the holders its label names take
    -- (all of it, unless they held their cards for part of the minute or hold fewer cards than the
    -- telemetry sizes the GPU: 0 where the label names no holder).
    SELECT *, sum(cards_left) OVER (PARTITION BY gpu_key, minute) AS cards_left_on_host,
           sum(CASE WHEN named THEN cards * named_cap / named_cards ELSE 0 END) OVER (PARTITION BY gpu_key, minute) AS named_taken
    FROM claims
),
host_labels AS (
    -- Per host-minute: whether a label names a holder there. Where one does, the labels match the
    -- records on this host, so a GPU whose label names a pod no holder is ran that pod (a listing
    -- taken after it ended does not hold it): the holders take none of it. Where none does, the
    -- labels may name pods as no record does (jobs from another source): they are as no label.
    -- `open_part`: the part of a GPU-minute open to the holders' cards left: a GPU no label gives to
    -- anyone, all of it; a GPU whose named holders take part of it (a pod that started at :30 takes
    -- half the minute, the pod before it, not named in that minute, may hold the other half), the rest.
    SELECT *, CASE WHEN named_cards = 0 AND labelled_gpu AND host_named = 1 THEN 0
                   WHEN named_taken >= 1 - 1e-9 THEN 0
                   ELSE 1 - named_taken END AS open_part
    FROM (SELECT *, max(CASE WHEN named_cards > 0 THEN 1 ELSE 0 END) OVER (PARTITION BY host, minute) AS host_named
          FROM shares)
),
ranked AS (
    -- The covered cards open to the holders' cards left of the GPUs up to this one, the busiest
    -- first (each GPU once: it is a row per holder, and the rows of one GPU are peers in that order).
    SELECT *, sum(covered_cards * open_part / holders_on_host)
                  OVER (PARTITION BY host, minute ORDER BY busy_fraction DESC NULLS LAST, gpu_key) AS cards_through
    FROM host_labels
),
portions AS (
    -- The part of a GPU's open part the holders' cards left hold, the busiest GPUs first, as in
    -- plain_portions (where no label names a holder, all their cards).
    SELECT *, CASE WHEN open_part = 0 THEN 0
                   ELSE held_portion(cards_left_on_host, cards_through - covered_cards * open_part, covered_cards * open_part) END AS portion
    FROM ranked
),
parts AS (
    -- Each holder's part of a GPU-minute (0-1): a holder its label names, its cards' share of the
    -- named holders' cards (never more than its cards); and of the open part, the part the holders'
    -- cards left hold, split by their cards left (no holder takes more than it has left; the rest
    -- is no one's).
    SELECT *,
           CASE WHEN named THEN cards * named_cap / named_cards ELSE 0 END
           + CASE WHEN cards_left > 0 AND open_part > 0 THEN cards_left / cards_left_on_host * portion * open_part ELSE 0 END AS part
    FROM portions
),
held AS (
    SELECT host, minute, workload_id, phase, busy FROM plain_held
    UNION ALL
    SELECT host, minute, workload_id, phase, busy FROM plain_unclaimed
    UNION ALL
    -- (a holder taking nothing of a GPU-minute has its row, at 0, as on the plain path: a workload
    -- holding GPUs has its hours, busy or not)
    SELECT host, minute, workload_id, phase, busy * part AS busy FROM parts
),
unclaimed AS (
    -- What no holder takes of a GPU-minute, on a host where labels name the holders' own GPUs (a GPU
    -- no label gives to one beyond the cards they have left; a named GPU beyond its pod's cards; a
    -- GPU another pod ran) or whose GPUs are more than the cards held: no workload record names what
    -- ran on it.
    SELECT host, minute, any_value(busy) * (1 - sum(part)) AS busy,
           NULL AS workload_id,
           CASE WHEN any_value(busy_fraction) >= $idle_busy_threshold THEN 'unattributed' ELSE 'idle' END AS phase
    FROM parts
    WHERE host_named = 1 OR portion < 1
    GROUP BY gpu_key, host, minute
    HAVING round(sum(part), 9) < 1
),
unheld AS (
    -- Minutes no workload holding GPUs covers.
    SELECT m.* FROM minutes AS m
    WHERE NOT EXISTS (
        SELECT 1 FROM core.workloads AS w
        WHERE w.host = m.host AND holds_minute(w.started_at, w.ended_at, m.minute)
          AND w.gpu_count > 0
    )
),
no_workload AS (
    SELECT u.host, u.minute, u.busy, NULL AS workload_id,
           CASE WHEN u.busy_fraction >= $idle_busy_threshold THEN 'unattributed' ELSE 'idle' END AS phase
    FROM unheld AS u
    WHERE NOT EXISTS (
        SELECT 1 FROM core.workloads AS w
        WHERE w.host = u.host AND holds_minute(w.started_at, w.ended_at, u.minute)
    )
),
gpuless_workloads AS (
    SELECT u.host, u.minute, u.busy, NULL AS workload_id, NULL AS phase
    FROM unheld AS u
    WHERE EXISTS (
        SELECT 1 FROM core.workloads AS w
        WHERE w.host = u.host AND holds_minute(w.started_at, w.ended_at, u.minute)
    )
)
SELECT utc_day(minute) AS day, timezone('UTC', date_trunc('hour', timezone('UTC', minute))) AS hour, host,
       -- To 9 decimals: a float sum's last bits follow the order rows are added in, which differs
       -- between a day built alone and built with its neighbours (MIG shares such as 3/7 show it).
       CAST(workload_id AS VARCHAR) AS workload_id, CAST(phase AS VARCHAR) AS phase, round(sum(busy), 9) AS busy_gpu_minutes
FROM (SELECT * FROM held UNION ALL BY NAME SELECT * FROM unclaimed UNION ALL BY NAME SELECT * FROM no_workload
      UNION ALL BY NAME SELECT * FROM gpuless_workloads)
GROUP BY ALL;
