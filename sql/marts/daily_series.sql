-- marts.daily_series: one row per UTC day and series (provider × sub-account × service × phase)
-- with its cost and its usage, the input of anomaly detection (findings.anomalies).
--
-- The usage of each day and series comes from marts.daily_series_by_billing_month, which explains
-- which charges count and how a charge spanning several days is spread over them; here the
-- billing months are added up (a charge is billed in one month: its charges count once) and the
-- days without charges are filled:
-- A day its provider billed anything but the series had no charge counts as zero spend. A day
-- the provider billed nothing at all (its export has not arrived) has no row: missing, not zero.
-- Days a spread charge covers count as billed up to the provider's last day with a charge of its
-- own; a spread part past that day waits for it (the rest of a month whose days have not come).
-- Each billing account's export arrives on its own: a series has no row past the last day one of
-- its billing accounts billed while its provider is at most 4 days further on (another account's
-- export ahead of it is no sign its own spend stopped, even where the sub-account also bills
-- through an account that is up to date). Further behind, the account is taken to have stopped
-- spending, and its days count as zero again (an account closed still alerts).
-- cost is NULL where a line of the day had no FX rate into the reporting currency (unknown, not
-- low). gpu_hours is NULL for series without GPU charges, egress_gb for series without egress.
CREATE OR REPLACE TABLE marts.daily_series AS
WITH observed AS (
    SELECT
        day, provider, sub_account, service, phase,
        any_value(reporting_currency) AS reporting_currency,
        CASE WHEN sum(parts_without_fx_rate) = 0 THEN sum(cost) END AS cost,
        sum(gpu_seconds) / 3600.0 AS gpu_hours,
        sum(egress_gb) AS egress_gb,
        sum(charge_lines) AS charge_lines
    FROM marts.daily_series_by_billing_month
    GROUP BY ALL
),
series AS (
    SELECT provider, sub_account, service, phase,
           any_value(reporting_currency) AS reporting_currency,
           bool_or(gpu_hours IS NOT NULL) AS has_gpu_hours,
           bool_or(egress_gb IS NOT NULL) AS has_egress
    FROM observed
    GROUP BY ALL
),
-- The days each provider billed a charge of any kind starting on them (every charge has a part there).
start_days AS (
    SELECT DISTINCT provider, day FROM marts.daily_cost_by_billing_month
),
billed_days AS (
    SELECT provider, day FROM start_days
    UNION
    SELECT o.provider, o.day FROM observed AS o
    WHERE o.day <= (SELECT max(s.day) FROM start_days AS s WHERE s.provider = o.provider)
),
-- Per sub-account: the first day one of its billing accounts' exports has not reached yet, of the
-- accounts behind their provider's last day by at most 4 days (the earliest such day); accounts up
-- to date, or further behind (taken to have stopped), hold nothing back.
series_waits AS (
    SELECT a.provider, a.sub_account, min(d.last_day) + 1 AS waits_from
    FROM (SELECT provider, coalesce(sub_account_id, '(none)') AS sub_account, billing_account_id
          FROM marts.daily_cost_by_billing_month GROUP BY ALL) AS a
    JOIN (SELECT provider, billing_account_id, max(day) AS last_day
          FROM marts.daily_cost_by_billing_month GROUP BY ALL) AS d
      ON d.provider = a.provider AND d.billing_account_id IS NOT DISTINCT FROM a.billing_account_id
    JOIN (SELECT provider, max(day) AS provider_last FROM start_days GROUP BY provider) AS p ON p.provider = a.provider
    WHERE d.last_day < p.provider_last AND d.last_day + 4 >= p.provider_last
    GROUP BY ALL
)
SELECT
    b.day,
    s.provider, s.sub_account, s.service, s.phase,
    s.reporting_currency,
    CASE WHEN o.day IS NULL THEN CAST(0 AS DECIMAL(38, 10)) ELSE CAST(o.cost AS DECIMAL(38, 10)) END AS cost,
    CASE WHEN s.has_gpu_hours THEN coalesce(o.gpu_hours, 0) END AS gpu_hours,
    CASE WHEN s.has_egress THEN coalesce(o.egress_gb, 0) END AS egress_gb,
    CAST(coalesce(o.charge_lines, 0) AS BIGINT) AS charge_lines
FROM series AS s
JOIN billed_days AS b USING (provider)
LEFT JOIN series_waits AS w USING (provider, sub_account)
LEFT JOIN observed AS o USING (day, provider, sub_account, service, phase)
WHERE o.day IS NOT NULL OR w.waits_from IS NULL OR b.day < w.waits_from
ORDER BY b.day, s.provider, s.sub_account, s.service, s.phase;
