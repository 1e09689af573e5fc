-- Exact money arithmetic helpers. Money is DECIMAL(38, 10) (±10^12 and far beyond, to 10^-10).
-- DuckDB divides DECIMALs as DOUBLE, so splits and rates work in whole units of 10^-10 (HUGEINT,
-- ±1.7·10^38: a 10^12 amount is 10^22 units, leaving 10^16 of room for weights and sums) and
-- convert back: no float ever touches an amount, and no product is left at an implicit width.
CREATE OR REPLACE MACRO to_units(amount) AS CAST(round(CAST(amount AS DECIMAL(38, 10)) * 10000000000) AS HUGEINT);
CREATE OR REPLACE MACRO from_units(units) AS CAST(CAST(units AS DECIMAL(38, 0)) * 0.0000000001 AS DECIMAL(38, 10));
-- `part` of `whole` (say, seconds) of an amount, in whole 10^-10 units rounded down; the amount itself
-- where `whole` is NULL (no share to take).
CREATE OR REPLACE MACRO share_of(amount, part, whole) AS CASE WHEN whole IS NULL THEN CAST(amount AS DECIMAL(38, 10))
                                                               ELSE from_units(to_units(amount) * part // whole) END;
-- Two charges share time: periods are half open, [start, end), and a charge of no length (its end
-- NULL or its start) is the instant it starts. Touching periods (a month's fee ending as the next
-- month's line begins) share none.
CREATE OR REPLACE MACRO charges_meet(a_start, a_end, b_start, b_end) AS
    (a_start < coalesce(b_end, b_start) OR (coalesce(b_end, b_start) = b_start AND a_start <= b_start))
    AND (b_start < coalesce(a_end, a_start) OR (coalesce(a_end, a_start) = a_start AND b_start <= a_start));
-- Micro-units (10^-6) where a coarser integer is wanted (anomaly series): widened first, so a
-- 10^12 amount never overflows DECIMAL(18) on the way.
CREATE OR REPLACE MACRO to_micros(amount) AS CAST(round(CAST(amount AS DECIMAL(38, 10)) * 1000000) AS HUGEINT);
CREATE OR REPLACE MACRO from_micros(micros) AS CAST(CAST(micros AS DECIMAL(38, 0)) * 0.000001 AS DECIMAL(38, 10));
-- Money × an FX rate (DECIMAL(38, 12)), rounded to money's 10 decimals. DECIMAL × DECIMAL adds the
-- scales (10 + 12 = 22, leaving 16 integer digits at width 38: 10^12 × a rate of 10^5 overflows),
-- so the whole part and the fraction are multiplied apart: whole × rate stays at scale 12 (26
-- integer digits), fraction (|f| < 1) × rate at scale 22 is rounded to 12; their sum is exact at
-- 12 decimals and rounded once more to 10.
CREATE OR REPLACE MACRO convert_money(amount, rate) AS CAST(round(
    CAST(trunc(CAST(amount AS DECIMAL(38, 10))) AS DECIMAL(38, 0)) * CAST(rate AS DECIMAL(38, 12))
    + CAST(round(CAST(CAST(amount AS DECIMAL(38, 10)) - trunc(CAST(amount AS DECIMAL(38, 10))) AS DECIMAL(11, 10))
                 * CAST(rate AS DECIMAL(38, 12)), 12) AS DECIMAL(38, 12)), 10) AS DECIMAL(38, 10));
-- n / d rounded to a whole number, half away from zero, for integers (HUGEINT): exact on every
-- engine. round() over a DOUBLE quotient is not: DuckDB rounds the double's binary value (12.5925 is
-- 12.59249999… there, so 12.592) and Spark its shortest decimal text (12.593). NULL where d is 0.
CREATE OR REPLACE MACRO rounded_quotient(n, d) AS CASE
    WHEN CAST(d AS HUGEINT) = 0 THEN NULL
    WHEN (CAST(n AS HUGEINT) < 0) = (CAST(d AS HUGEINT) < 0)
        THEN (2 * abs(CAST(n AS HUGEINT)) + abs(CAST(d AS HUGEINT))) // (2 * abs(CAST(d AS HUGEINT)))
    ELSE -((2 * abs(CAST(n AS HUGEINT)) + abs(CAST(d AS HUGEINT))) // (2 * abs(CAST(d AS HUGEINT))))
END;
-- The UTC calendar day and minute of a TIMESTAMPTZ, whatever the session's TimeZone setting.
CREATE OR REPLACE MACRO utc_day(ts) AS CAST(timezone('UTC', ts) AS DATE);
CREATE OR REPLACE MACRO utc_minute(ts) AS timezone('UTC', date_trunc('minute', timezone('UTC', ts)));
-- The first whole UTC minute at or after ts.
CREATE OR REPLACE MACRO utc_minute_ceil(ts) AS CASE WHEN utc_minute(ts) = ts THEN ts ELSE utc_minute(ts) + INTERVAL 1 MINUTE END;
-- Oracle states a tenancy's charges in two forms, its cost reports (connector oci_cost: the tenancy
-- is the billing account) and its FOCUS reports (the tenancy is the sub-account). The tenancy of
-- an Oracle line in either form, NULL for any other line.
CREATE OR REPLACE MACRO oracle_tenancy(provider, connector, billing_account, sub_account) AS CASE
    WHEN provider = 'Oracle' AND connector = 'oci_cost' THEN billing_account
    WHEN provider = 'Oracle' AND connector = 'focus' THEN sub_account
END;
-- Which form a tenancy's hour of charges counts through where both hold lines starting in it: the
-- one holding more of them (the other is behind: a cost report not yet delivered, a FOCUS report
-- of the morning, a line arriving late), the cost reports when they hold as many.
CREATE OR REPLACE MACRO oracle_hour_form(own_lines, focus_lines) AS
    CASE WHEN focus_lines > coalesce(own_lines, 0) THEN 'focus' ELSE 'oci_cost' END;
-- A list of UTC days a partitioned model builds ('YYYY-MM-DD'; '*' every day, 'unknown' rows
-- without a timestamp) as a range: its first day, its last, and whether it leaves no day out.
-- Written over the list alone, so DuckDB folds them to constants and pushes `ts >= first AND
-- ts < last + 1` into its scans. NULL where the list holds '*' or 'unknown'.
CREATE OR REPLACE MACRO first_listed_day(days) AS try_cast(list_min(days) AS DATE);
CREATE OR REPLACE MACRO last_listed_day(days) AS try_cast(list_max(days) AS DATE);
CREATE OR REPLACE MACRO days_without_gap(days) AS array_length(days) = date_diff('day', first_listed_day(days), last_listed_day(days)) + 1;
-- Whether a timestamp `ts` falls on a list of UTC days a daily model builds ('*': all): a range
-- first, which DuckDB prunes row groups by, then each row's day only when the list has gaps.
CREATE OR REPLACE MACRO in_listed_days(ts, days) AS
    list_contains(days, '*')
    OR (ts >= first_listed_day(days) AND ts < last_listed_day(days) + 1
        AND (days_without_gap(days) OR list_contains(days, strftime(ts, '%Y-%m-%d'))));
-- The same for a list of months ('YYYY-MM'): the first day of its first and of its last month.
CREATE OR REPLACE MACRO first_listed_month(months) AS try_cast(list_min(months) || '-01' AS DATE);
CREATE OR REPLACE MACRO last_listed_month(months) AS try_cast(list_max(months) || '-01' AS DATE);
-- Whether a billing period start `ts` falls in a list of months a monthly mart builds ('*': all;
-- 'unknown': no billing period): a range first, which DuckDB prunes row groups by, then each
-- row's month.
CREATE OR REPLACE MACRO in_listed_months(ts, months) AS
    list_contains(months, '*')
    OR (list_contains(months, 'unknown') AND list_contains(months, coalesce(strftime(ts, '%Y-%m'), 'unknown')))
    OR (ts >= first_listed_month(months) AND ts < last_listed_month(months) + INTERVAL 1 MONTH
        AND list_contains(months, strftime(ts, '%Y-%m')));
-- Host names as every connector normalises them (connectors/_telemetry.py): lower case, DNS
-- suffix dropped, IP addresses kept whole. Invoices' resource names go through the same rule.
CREATE OR REPLACE MACRO norm_host(h) AS CASE
    WHEN regexp_matches(lower(trim(h)), '^\d{1,3}(\.\d{1,3}){3}$') THEN lower(trim(h))
    ELSE regexp_replace(lower(trim(h)), '\..*$', '')
END;
-- BEGIN gpu_model_key: generated from models/data/gpu_models.csv by `python -m models.gpus`; do not edit
-- A GPU's canonical model key, whoever names it: telemetry ('NVIDIA A100-SXM4-80GB'), invoices
-- ('A100 80G') and the price catalog all become 'A100-80GB'. A name no pattern knows stays as its
-- trimmed text, and gpu_model_known() says false for it.
CREATE OR REPLACE MACRO gpu_model_key(name) AS CASE
    WHEN name IS NULL OR trim(name) = '' THEN NULL
    WHEN regexp_matches(name, '(?i)\bGB200\b') THEN 'GB200'
    WHEN regexp_matches(name, '(?i)\bGH200\b') THEN 'GH200'
    WHEN regexp_matches(name, '(?i)\bB200\b') THEN 'B200'
    WHEN regexp_matches(name, '(?i)\bH200\b') THEN 'H200'
    WHEN regexp_matches(name, '(?i)\bH100\b.*\bNVL\b') THEN 'H100-NVL-94GB'
    WHEN regexp_matches(name, '(?i)\bH100\b') THEN 'H100-80GB'
    WHEN regexp_matches(name, '(?i)\bH800\b') THEN 'H800-80GB'
    WHEN regexp_matches(name, '(?i)\bH20\b') THEN 'H20'
    WHEN regexp_matches(name, '(?i)\bA100\b.*\b80\s*G') THEN 'A100-80GB'
    WHEN regexp_matches(name, '(?i)\bA100\b') THEN 'A100-40GB'
    WHEN regexp_matches(name, '(?i)\bA800\b.*\b40\s*G') THEN 'A800-40GB'
    WHEN regexp_matches(name, '(?i)\bA800\b') THEN 'A800-80GB'
    WHEN regexp_matches(name, '(?i)\bMI300X\b') THEN 'MI300X'
    WHEN regexp_matches(name, '(?i)\bL40S\b') THEN 'L40S'
    WHEN regexp_matches(name, '(?i)\bL40\b') THEN 'L40'
    WHEN regexp_matches(name, '(?i)\bL20\b') THEN 'L20'
    WHEN regexp_matches(name, '(?i)\bL4\b') THEN 'L4'
    WHEN regexp_matches(name, '(?i)\bA40\b') THEN 'A40'
    WHEN regexp_matches(name, '(?i)\bA30\b') THEN 'A30'
    WHEN regexp_matches(name, '(?i)\bA10G\b') THEN 'A10G'
    WHEN regexp_matches(name, '(?i)\bA10\b') THEN 'A10'
    WHEN regexp_matches(name, '(?i)\bRTX[\s_-]*PRO[\s_-]*6000\b') THEN 'RTX-PRO-6000'
    WHEN regexp_matches(name, '(?i)\bRTX[\s_-]*PRO[\s_-]*5000\b') THEN 'RTX-PRO-5000'
    WHEN regexp_matches(name, '(?i)\bRTX[\s_-]*PRO[\s_-]*4500\b') THEN 'RTX-PRO-4500'
    WHEN regexp_matches(name, '(?i)\bRTX[\s_-]*6000[\s_-]*Ada\b') THEN 'RTX-6000-Ada'
    WHEN regexp_matches(name, '(?i)\bRTX[\s_-]*A6000\b') THEN 'RTX-A6000'
    WHEN regexp_matches(name, '(?i)\bQuadro[\s_-]*RTX[\s_-]*6000\b') THEN 'Quadro-RTX-6000'
    WHEN regexp_matches(name, '(?i)\bRTX[\s_-]*4090\b') THEN 'RTX-4090'
    WHEN regexp_matches(name, '(?i)\bV100\b.*\b32\s*G') THEN 'V100-32GB'
    WHEN regexp_matches(name, '(?i)\bV100\b') THEN 'V100-16GB'
    WHEN regexp_matches(name, '(?i)\bP100\b') THEN 'P100'
    WHEN regexp_matches(name, '(?i)\bP40\b') THEN 'P40'
    WHEN regexp_matches(name, '(?i)\bP4\b') THEN 'P4'
    WHEN regexp_matches(name, '(?i)\bT4G\b') THEN 'T4G'
    WHEN regexp_matches(name, '(?i)\bT4\b') THEN 'T4'
    WHEN regexp_matches(name, '(?i)\bK80\b') THEN 'K80'
    WHEN regexp_matches(name, '(?i)\bM60\b') THEN 'M60'
    WHEN regexp_matches(name, '(?i)\bV520\b') THEN 'V520'
    ELSE trim(name)
END;
CREATE OR REPLACE MACRO gpu_model_known(key) AS key IN ('GB200', 'GH200', 'B200', 'H200', 'H100-NVL-94GB', 'H100-80GB', 'H800-80GB', 'H20', 'A100-80GB', 'A100-40GB', 'A800-40GB', 'A800-80GB', 'MI300X', 'L40S', 'L40', 'L20', 'L4', 'A40', 'A30', 'A10G', 'A10', 'RTX-PRO-6000', 'RTX-PRO-5000', 'RTX-PRO-4500', 'RTX-6000-Ada', 'RTX-A6000', 'Quadro-RTX-6000', 'RTX-4090', 'V100-32GB', 'V100-16GB', 'P100', 'P40', 'P4', 'T4G', 'T4', 'K80', 'M60', 'V520');
-- The compute slices a card splits into under MIG (models.gpus.MIG_CARD_SLICES, from NVIDIA's MIG
-- user guide). A MIG instance's profile names its own ('3g.40gb'), so its share of the card is
-- its slices over these (core.gpu_minutes' gpu_share).
CREATE OR REPLACE MACRO mig_card_slices(model_key) AS CASE WHEN model_key = 'A30' THEN 4 WHEN model_key = 'RTX-PRO-6000' THEN 4 WHEN model_key = 'RTX-PRO-5000' THEN 2 WHEN model_key = 'RTX-PRO-4500' THEN 2 ELSE 7 END;
-- END gpu_model_key
-- Whether a sample at t0_us (microseconds since 1970) belongs in the window of its UTC day shifted by
-- `shift` (-1, 0, 1): its own day's always, a neighbour's when it lies within max_gap_s of their
-- midnight (core.gpu_minutes builds a day from its samples and its neighbours' edges).
CREATE OR REPLACE MACRO in_day_window(t0_us, shift, max_gap_s) AS
    shift = 0
    OR (shift = 1 AND t0_us % 86400000000 >= 86400000000 - max_gap_s * 1000000)
    OR (shift = -1 AND t0_us % 86400000000 < max_gap_s * 1000000);
-- The physical card a MIG instance's gpu_key is a slice of: the key less the '/mig<instance>'
-- core.gpu_samples appends to it.
CREATE OR REPLACE MACRO mig_card_key(gpu_key, mig_instance) AS
    substr(gpu_key, 1, length(gpu_key) - length('/mig' || mig_instance));
-- The cards a workload holds (core.workloads): gpu_cards where its source names MIG profiles (a
-- slice as its share of the card), else gpu_count whole cards. Every reader of held GPUs in cards.
CREATE OR REPLACE MACRO workload_cards(gpu_cards, gpu_count) AS coalesce(gpu_cards, gpu_count);
-- The microseconds of [window_start, window_end) a workload running from started_at to ended_at
-- (NULL: still running) holds; the cost side pays the same time in seconds.
CREATE OR REPLACE MACRO held_us(started_at, ended_at, window_start, window_end) AS
    greatest(0, epoch_us(least(coalesce(ended_at, window_end), window_end)) - epoch_us(greatest(started_at, window_start)));
-- Whether the workload holds some of the minute starting at `minute` (held_in_minute, below, above 0): the
-- join that finds a minute's workloads. One that ended as it started holds none.
CREATE OR REPLACE MACRO holds_minute(started_at, ended_at, minute) AS
    started_at < minute + INTERVAL 1 MINUTE AND coalesce(ended_at, 'infinity'::TIMESTAMPTZ) > greatest(minute, started_at);
-- The part (0-1) of that minute it holds: a job of 30 s holds half a minute, as the charges pay
-- its seconds.
CREATE OR REPLACE MACRO held_in_minute(started_at, ended_at, minute) AS
    held_us(started_at, ended_at, minute, minute + INTERVAL 1 MINUTE) / 60000000.0;
-- The part of a GPU (of `share` cards) that workloads holding `held_cards` hold, when the GPUs
-- before it in their order take `cards_before` (marts.gpu_busy_by_workload_hour: the busiest
-- first): 0-1, and 0 or 1 within a billionth of a card, so float sums of sevenths leave no crumb.
CREATE OR REPLACE MACRO held_portion(held_cards, cards_before, share) AS CASE
    WHEN share <= 0 OR held_cards - cards_before >= share - 1e-9 THEN 1
    WHEN held_cards - cards_before <= 1e-9 THEN 0
    ELSE (held_cards - cards_before) / share END;
-- A quantity (a double: GPU-hours, GB) times a DECIMAL price, as DECIMAL money: the quantity is
-- fixed to 10 decimals first, so the product itself is exact decimal arithmetic (scale 10 + the
-- price's), then rounded to money's 10 decimals.
CREATE OR REPLACE MACRO price_times(quantity, price) AS
    CAST(round(CAST(round(quantity, 10) AS DECIMAL(28, 10)) * price, 10) AS DECIMAL(38, 10));
-- A line that pays for GPUs running, so its GPUs count as GPU-hours paid: a Usage line, not negative,
-- not a correction (a refund, a restated invoice), not a commitment's or reservation's unused part.
-- Credits, negations and refunds change what the hours cost, not how many were paid
-- (marts.gpu_hour_prices, marts.cost_attribution's gpu_seconds, marts.gpu_hours_profile).
CREATE OR REPLACE MACRO pays_for_gpu_hours(category, charge_class, effective_cost, billed_cost, commitment_status, reservation_status) AS
    category = 'Usage' AND charge_class IS DISTINCT FROM 'Correction' AND effective_cost >= 0 AND billed_cost >= 0
    AND coalesce(commitment_status, '') <> 'Unused' AND coalesce(reservation_status, '') <> 'Unused';
-- How many of a unit a unit names: '10 Hours' and '10 GB' are 10, '10Hours' too, 'Hours' 1 (FOCUS's
-- '<quantity> <unit>'). time_unit_seconds and data_unit_gb read a block with it.
CREATE OR REPLACE MACRO unit_count(unit) AS
    coalesce(TRY_CAST(nullif(regexp_extract(coalesce(unit, ''), '^\s*([0-9]+(\.[0-9]+)?)\s*[A-Za-z]', 1), '') AS DECIMAL(18, 3)), 1);
-- Seconds in one unit of a time quantity: 'Hours', 'Hrs', 'hour', 'GPU-Hours', OCI's 'GPU Per Hour',
-- 'seconds', 'Minutes', 'Days'; a block of them ('10 Hours', FOCUS's '<quantity> <unit>') is that
-- many. NULL for any other unit: it says nothing about how long a resource ran.
CREATE OR REPLACE MACRO time_unit_seconds(unit) AS
    CASE regexp_replace(lower(regexp_replace(coalesce(unit, ''), '^\s*[0-9]+(\.[0-9]+)?\s*', '')), '\bgpus?\b|\bper\b|[\s/-]', '', 'g')
        WHEN 'hour' THEN 3600 WHEN 'hours' THEN 3600 WHEN 'hr' THEN 3600 WHEN 'hrs' THEN 3600 WHEN 'h' THEN 3600
        WHEN 'second' THEN 1 WHEN 'seconds' THEN 1 WHEN 'sec' THEN 1 WHEN 'secs' THEN 1 WHEN 's' THEN 1
        WHEN 'minute' THEN 60 WHEN 'minutes' THEN 60 WHEN 'min' THEN 60 WHEN 'mins' THEN 60
        WHEN 'day' THEN 86400 WHEN 'days' THEN 86400
    END * unit_count(unit);
-- The GPU-seconds a GPU charge paid for: its GPUs over its charge period, or fewer where its consumed
-- quantity says the resource ran less of it (a CUR hour of an instance that ran 0.684 h of it: 2,462
-- GPU-seconds of a 1-GPU instance, not 3,600). The quantity is GPU time when its unit names GPUs
-- ('GPU-Hours'), else the resource's time, times its GPUs. A quantity that is missing, zero, negative
-- or in no time unit says nothing, and never more than the period is paid for. A line of several
-- instances whose x_GpuCount counts all their GPUs reads its instance-hours at all of them: capped at
-- the period, as before, but a part-run line of that kind is read as more than it ran. The cap is
-- taken before the cast, so an absurd quantity is the whole period, not an overflow.
-- Its units are read only on GPU lines with a quantity: a CASE evaluates its branch on the rows it
-- selects, and the unit's patterns on every line of a 1M-line CUR cost seconds.
CREATE OR REPLACE MACRO paid_gpu_seconds(gpu_count, period_start, period_end, quantity, unit) AS
    least(gpu_count * datediff('second', period_start, period_end),
          CASE WHEN gpu_count > 0 AND quantity > 0 THEN
              CASE WHEN time_unit_seconds(unit) IS NOT NULL
                   THEN greatest(1, CAST(round(least(
                       CAST(quantity AS DOUBLE) * time_unit_seconds(unit)
                           * CASE WHEN regexp_matches(coalesce(unit, ''), '(?i)\bgpus?\b') THEN 1 ELSE gpu_count END,
                       gpu_count * datediff('second', period_start, period_end))) AS BIGINT))
              END
          END);
-- The part of `amount` (of a line over [start, end)) that falls within [from_, until): a usage line
-- clipped to a credit's period pays that share of what it ran. Whole units, truncated.
CREATE OR REPLACE MACRO part_within(amount, start, end_, from_, until) AS
    amount * datediff('second', greatest(start, from_), least(end_, until)) // datediff('second', start, end_);
-- A GPU credit or negation states no quantity of its own: it pays for what the usage lines of its
-- resource ran of what they could (`ran` and `could` summed over them) in the part of its period
-- they cover (`covered` of its `period` seconds; NULL: all of it), so a refunded half-hour is that
-- half-hour, not the whole one, and a month's credit on an instance billed two days pays for those
-- two days. The usage lines are those of the same period, else those inside it (callers' rule). A
-- line with a quantity of its own keeps it.
CREATE OR REPLACE MACRO followed_paid_gpu_seconds(own_paid, capacity, pays, ran, could, covered, period) AS
    CASE WHEN NOT pays AND own_paid = capacity AND could > 0 AND period > 0
              AND (ran < could OR coalesce(covered, period) < period)
         THEN CAST(greatest(1, CAST(capacity AS HUGEINT) * ran * coalesce(covered, period) // (CAST(could AS HUGEINT) * period))
                   AS BIGINT)
         ELSE own_paid END;
-- FX rates as whole units of 10^-12, so inverse and cross rates divide integers, never floats.
CREATE OR REPLACE MACRO rate_units(rate) AS CAST(round(rate * 1000000000000) AS HUGEINT);
CREATE OR REPLACE MACRO from_rate_units(units) AS CAST(CAST(units AS DECIMAL(38, 0)) * 0.000000000001 AS DECIMAL(38, 12));
-- Data transfer: which lines move data out, how many GB, and by which path. The rules are macros
-- here, not a CSV, so findings.egress, marts.daily_series and an analyst's own query in the
-- warehouse (macros are stored in it) classify a line the same way, with no extra table to build.
-- Each rule is one line, the provider's own field first, and the first rule that matches wins.
--
-- A data-size unit in GB: 'GB', 'GiB', 'gibibyte', 'bytes', Azure's '1 GB' and '10 GB' (a count
-- of units), OCI's 'GB Of Data Transferred'. NULL for anything else, time-based units included
-- ('GB-Mo', 'GB/Month', 'byte-seconds' measure storage, not transfer). Exact DECIMAL factors.
CREATE OR REPLACE MACRO data_unit_gb(unit) AS CAST(
    CASE regexp_replace(regexp_replace(lower(trim(regexp_replace(coalesce(unit, ''), '^\s*[0-9]+(\.[0-9]+)?\s*', ''))),
                                       '\s+of data transferred$', ''), '(.)s$', '\1')
        WHEN 'b' THEN 0.000000001 WHEN 'byte' THEN 0.000000001
        WHEN 'kb' THEN 0.000001 WHEN 'kilobyte' THEN 0.000001
        WHEN 'mb' THEN 0.001 WHEN 'megabyte' THEN 0.001
        WHEN 'gb' THEN 1 WHEN 'gigabyte' THEN 1
        WHEN 'tb' THEN 1000 WHEN 'terabyte' THEN 1000
        WHEN 'kib' THEN 0.000001024 WHEN 'kibibyte' THEN 0.000001024
        WHEN 'mib' THEN 0.001048576 WHEN 'mebibyte' THEN 0.001048576
        WHEN 'gib' THEN 1.073741824 WHEN 'gibibyte' THEN 1.073741824
        WHEN 'tib' THEN 1099.511627776 WHEN 'tebibyte' THEN 1099.511627776
    END::DECIMAL(30, 9)
    * unit_count(unit)
    AS DECIMAL(24, 9));
-- A quantity in a data-size unit, in GB (DECIMAL, to the byte); NULL when the unit is no data size.
-- gb_of takes the unit's factor (data_unit_gb) already looked up: a model reading a million lines
-- looks it up once per distinct unit and joins it back (marts.daily_series, findings.egress).
CREATE OR REPLACE MACRO gb_of(quantity, gb_per_unit) AS
    CAST(CAST(quantity AS DECIMAL(38, 10)) * gb_per_unit AS DECIMAL(38, 10));
CREATE OR REPLACE MACRO data_gb(quantity, unit) AS gb_of(quantity, data_unit_gb(unit));
-- The AWS usage type of a line: the CUR's lineItem/UsageType (x_ExtraColumns), else a SkuId or a
-- description that carries one ('USD 0.02 per GB for EUN1-AWS-Out-Bytes in EU (Stockholm)').
CREATE OR REPLACE MACRO aws_usage_type(extra, sku, description) AS coalesce(
    nullif(json_extract_string(CASE WHEN json_valid(extra) THEN extra END, '$.usage_type'), ''),
    CASE WHEN regexp_matches(sku, '-O?Bytes$') THEN sku END,
    nullif(regexp_extract(coalesce(description, ''), '(?:[A-Za-z0-9]+-)*[A-Za-z0-9]+-O?Bytes', 0), ''));
-- The path of a data-transfer line: 'internet', 'cross_region', 'cross_az', 'intra_region';
-- 'inbound' for data coming in (not egress); NULL for a line that moves no data. From each
-- provider's own fields, never from a loose word match ('US West (Oregon)' holds "region" too):
--   AWS: the usage type ([from-]DataTransfer-Out-Bytes, FROM-TO-AWS-Out-Bytes, DataTransfer-Regional-Bytes,
--        …-In-Bytes), else the line's description as AWS writes it ("X data transfer to Y");
--   Azure: the meter name and subcategory (x_ExtraColumns.meter_subcategory) under its meter category;
--   Google Cloud: the SKU description ("Network Internet Egress from X to Y", "Network Inter Region …",
--        "Network Inter Zone Egress");
--   any other provider: the description and service, in plain words.
-- 'none' marks a line a provider rule has ruled out (a load balancer's data processed), so the
-- generic words do not pick it up again.
CREATE OR REPLACE MACRO transfer_path(provider, extra, sku, description, service_name) AS nullif(coalesce(
    CASE WHEN provider = 'AWS' THEN (
        WITH a AS (SELECT aws_usage_type(extra, sku, description) AS ut, coalesce(description, '') AS d)
        SELECT CASE
            WHEN regexp_matches(ut, '-In-O?Bytes$') THEN 'inbound'                            -- any …-In-Bytes
            WHEN regexp_matches(ut, 'DataTransfer-(Regional|xAZ-Out)-O?Bytes$') THEN 'cross_az'
            WHEN regexp_matches(ut, '^([A-Z]+[0-9]*)-(?:[A-Za-z]+-)?([A-Z]+[0-9]*)-(?:[A-Za-z]+-)?AWS-Out-O?Bytes$') THEN
                CASE WHEN regexp_extract(ut, '^([A-Z]+[0-9]*)-(?:[A-Za-z]+-)?([A-Z]+[0-9]*)-', 1)
                          = regexp_extract(ut, '^([A-Z]+[0-9]*)-(?:[A-Za-z]+-)?([A-Z]+[0-9]*)-', 2)
                     THEN 'intra_region' ELSE 'cross_region' END                          -- FROM-TO-AWS-Out-Bytes
            WHEN regexp_matches(ut, '-AWS-Out-O?Bytes$') THEN 'cross_region'
            WHEN regexp_matches(ut, 'DataTransfer-Out-O?Bytes$') THEN 'internet'
            WHEN regexp_matches(ut, 'CloudFront-(In|Out)-O?Bytes$') THEN 'none'                 -- origin fetches: free
            WHEN regexp_matches(d, '(?i)data transfer in\b|data transfer from\b') THEN 'inbound'
            WHEN regexp_matches(d, '(?i)regional data transfer|between (EC2 )?AZs') THEN 'cross_az'
            WHEN regexp_matches(d, '(?i)data transfer out of .* to CloudFront') THEN 'none'
            WHEN regexp_matches(d, '(?i) - (.+) data transfer to (.+)$') THEN
                CASE WHEN lower(regexp_extract(d, '(?i) - (.+) data transfer to (.+)$', 1))
                          = lower(regexp_extract(d, '(?i) - (.+) data transfer to (.+)$', 2))
                     THEN 'intra_region' ELSE 'cross_region' END
            WHEN regexp_matches(d, '(?i)data transfer out') THEN 'internet'
        END FROM a)
    WHEN provider IN ('Microsoft', 'Azure') THEN (
        WITH z AS (SELECT concat_ws(' | ', json_extract_string(CASE WHEN json_valid(extra) THEN extra END, '$.meter_subcategory'),
                                    description) AS m)
        SELECT CASE
            WHEN regexp_matches(m, '(?i)data processed') THEN 'none'          -- load balancer / NAT / private link
            WHEN regexp_matches(m, '(?i)data transfer in\b|\bingress\b|\binbound\b') THEN 'inbound'
            WHEN regexp_matches(m, '(?i)availability zone|inter[- ]?zone') THEN 'cross_az'
            WHEN regexp_matches(m, '(?i)intra[- ]?region') THEN 'intra_region'          -- VNet peering in a region
            WHEN regexp_matches(m, '(?i)inter[- ]?region|intra[- ]?continent|inter[- ]?continent|global') THEN 'cross_region'
            WHEN regexp_matches(m, '(?i)data transfer out|\begress\b') THEN 'internet'
        END FROM z)
    WHEN provider IN ('Google Cloud', 'Google', 'GCP') THEN CASE
        WHEN regexp_matches(description, '(?i)\bingress\b') THEN 'inbound'
        WHEN regexp_matches(description, '(?i)inter[- ]?zone|between zones') THEN 'cross_az'
        WHEN regexp_matches(description, '(?i)intra[- ]?(zone|region)') THEN 'intra_region'
        WHEN regexp_matches(description, '(?i)internet|download (worldwide|china|australia)|carrier peering|\bcdn\b') THEN 'internet'
        WHEN regexp_matches(description, '(?i)inter[- ]?region|inter[- ]?continent|google egress|egress (from|between) .+ (to|and) ') THEN 'cross_region'
        WHEN regexp_matches(description, '(?i)\begress\b') THEN 'internet'
    END
    END,
    -- Any provider, in plain words (GPU clouds, OCI, FOCUS exports of others).
    CASE
        WHEN regexp_matches(concat_ws(' ', description, service_name), '(?i)data transfer in\b|\bingress\b|\binbound\b|入网|流入') THEN 'inbound'
        WHEN regexp_matches(description, '(?i)inter[- ]?(availability[- ]?)?zone|cross[- ]?(az|zone)') THEN 'cross_az'
        WHEN regexp_matches(description, '(?i)inter[- ]?region|cross[- ]?region') THEN 'cross_region'
        WHEN regexp_matches(description, '(?i)intra[- ]?region') THEN 'intra_region'
        WHEN regexp_matches(concat_ws(' ', description, service_name), '(?i)transfer out|\begress\b|outbound (data|traffic|transfer)|data transfer|公网|出网|流出') THEN 'internet'
    END), 'none');
-- The x_ExtraColumns fields transfer_path reads (keep the two in step): lines alike in these and in
-- transfer_path's other arguments have the same path, however their other extra fields differ
-- (OCI's per-line reference_no), so a model classifies each such kind of line once.
CREATE OR REPLACE MACRO transfer_fields(extra) AS {
    'usage_type': json_extract_string(CASE WHEN json_valid(extra) THEN extra END, '$.usage_type'),
    'meter_subcategory': json_extract_string(CASE WHEN json_valid(extra) THEN extra END, '$.meter_subcategory')};
-- Each kind of line of `lines` (provider, transfer fields, SKU, description, service, units) once,
-- with its transfer path and its units' GB: the string matching runs per kind (a few hundred on a
-- 1M-row CUR), and a model joins its lines back on these columns. One line per kind speaks for
-- it: its kind's lines share the extra fields transfer_path reads.
CREATE OR REPLACE MACRO transfer_line_kinds(lines) AS TABLE
SELECT *,
       transfer_path(ProviderName, x_ExtraColumns, SkuId, ChargeDescription, ServiceName) AS path,
       data_unit_gb(ConsumedUnit) AS consumed_gb_per_unit,
       data_unit_gb(PricingUnit) AS pricing_gb_per_unit
FROM (SELECT ProviderName, transfer_fields(x_ExtraColumns) AS fields, SkuId, ChargeDescription, ServiceName,
             ConsumedUnit, PricingUnit, any_value(x_ExtraColumns) AS x_ExtraColumns
      FROM query_table(lines) GROUP BY ALL);
-- Egress GB of a line: one that moves data out (any path but 'inbound') with a data size > 0,
-- read from its consumed quantity, else from its pricing quantity (GCP prices in gibibytes).
-- NULL for any other line.
-- egress_gb_of takes the units' factors (data_unit_gb) already looked up, as gb_of does.
CREATE OR REPLACE MACRO egress_gb_of(consumed_quantity, consumed_gb_per_unit, pricing_quantity, pricing_gb_per_unit, path) AS
    CASE WHEN path IS NOT NULL AND path <> 'inbound'
              AND coalesce(gb_of(consumed_quantity, consumed_gb_per_unit), gb_of(pricing_quantity, pricing_gb_per_unit)) > 0
         THEN coalesce(gb_of(consumed_quantity, consumed_gb_per_unit), gb_of(pricing_quantity, pricing_gb_per_unit)) END;
CREATE OR REPLACE MACRO egress_gb(consumed_quantity, consumed_unit, pricing_quantity, pricing_unit, path) AS
    egress_gb_of(consumed_quantity, data_unit_gb(consumed_unit), pricing_quantity, data_unit_gb(pricing_unit), path);
-- The UTC days a charge period covers, each with its seconds in the period: what a multi-day
-- charge is spread over (a monthly fee is a month of days, not a spike on the 1st). A period of
-- zero length, or without an end, is its start day.
CREATE OR REPLACE MACRO charge_days(start_ts, end_ts) AS
    CASE WHEN end_ts IS NULL OR end_ts <= start_ts
         THEN [{'day': utc_day(start_ts), 'seconds': CAST(1 AS BIGINT)}]
         ELSE list_transform(
                  generate_series(utc_day(start_ts), utc_day(end_ts - INTERVAL 1 MICROSECOND), INTERVAL 1 DAY),
                  lambda d: {'day': CAST(d AS DATE),
                        'seconds': datediff('second', greatest(start_ts, timezone('UTC', d)),
                                            least(end_ts, timezone('UTC', d + INTERVAL 1 DAY)))})
    END;
-- Azure's actual-cost and amortized-cost exports of one scope merged into one row per charge
-- (core.cost_lines; the connector sets x_AzureDataset and x_AzureChargeKey). Within a billing
-- account and billing period that has both datasets loaded, the actual export alone states
-- BilledCost and the amortized export alone states EffectiveCost, so the totals are the
-- provider's own totals whatever pairs up:
--   a charge in both: one row, the amortized one, with BilledCost from its actual twin;
--   a charge only in actual (a commitment purchase, which amortized data spreads over usage):
--     BilledCost as billed, EffectiveCost 0;
--   a charge only in amortized (unused commitment, or usage the actual export lacks): as the
--     amortized export says, BilledCost 0.
-- A scope with one dataset keeps what that dataset says. Twins pair by key and, for identical
-- keys, by their order (file, row). Rows of other providers pass through unchanged.
CREATE OR REPLACE MACRO azure_actual_amortized(lines) AS TABLE
WITH azure AS (
    SELECT *,
           bool_or(x_AzureDataset = 'actual') OVER scope AS __has_actual,
           bool_or(x_AzureDataset = 'amortized') OVER scope AS __has_amortized,
           coalesce(BillingPeriodStart, date_trunc('month', ChargePeriodStart)) AS __period,
           x_AzureChargeKey || '#' || row_number() OVER (
               PARTITION BY ProviderName, BillingAccountId, coalesce(BillingPeriodStart, date_trunc('month', ChargePeriodStart)),
                            x_AzureDataset, x_AzureChargeKey
               ORDER BY x_SourceFile, x_SourceRow) AS __twin
    FROM query_table(lines)
    WHERE x_AzureDataset IS NOT NULL
    WINDOW scope AS (PARTITION BY ProviderName, BillingAccountId, coalesce(BillingPeriodStart, date_trunc('month', ChargePeriodStart)))
),
twins AS (
    SELECT *,
           sum(BilledCost) FILTER (WHERE x_AzureDataset = 'actual') OVER twin AS __actual_billed,
           count(*) FILTER (WHERE x_AzureDataset = 'amortized') OVER twin AS __amortized_rows
    FROM azure
    WINDOW twin AS (PARTITION BY ProviderName, BillingAccountId, __period, __twin)
)
SELECT * FROM query_table(lines) WHERE x_AzureDataset IS NULL
UNION ALL
SELECT * EXCLUDE (__has_actual, __has_amortized, __period, __twin, __actual_billed, __amortized_rows) REPLACE (
    CASE WHEN x_AzureDataset = 'amortized' AND __has_actual THEN coalesce(__actual_billed, 0) ELSE BilledCost END AS BilledCost,
    CASE WHEN x_AzureDataset = 'actual' AND __has_amortized THEN 0 ELSE EffectiveCost END AS EffectiveCost)
FROM twins
WHERE NOT (x_AzureDataset = 'actual' AND __has_amortized AND __amortized_rows > 0);

-- FOCUS 1.2 conformance (core.cost_lines' `conformed` step; models/focus.py holds the same rules
-- for the own check, pipelines/warehouse/focus_conformance.py).
-- A ServiceSubcategory's one parent ServiceCategory, as FOCUS 1.2 enumerates them; NULL for a
-- value FOCUS does not allow.
CREATE OR REPLACE MACRO focus_subcategory_parent(sub) AS CASE
    WHEN sub IN ('AI Platforms', 'Bots', 'Generative AI', 'Machine Learning', 'Natural Language Processing') THEN 'AI and Machine Learning'
    WHEN sub IN ('Analytics Platforms', 'Business Intelligence', 'Data Processing', 'Search', 'Streaming Analytics') THEN 'Analytics'
    WHEN sub IN ('Productivity and Collaboration') THEN 'Business Applications'
    WHEN sub IN ('Containers', 'End User Computing', 'Quantum Compute', 'Serverless Compute', 'Virtual Machines') THEN 'Compute'
    WHEN sub IN ('Caching', 'Data Warehouses', 'Ledger Databases', 'NoSQL Databases', 'Relational Databases', 'Time Series Databases') THEN 'Databases'
    WHEN sub IN ('Developer Platforms', 'Continuous Integration and Deployment', 'Development Environments', 'Source Code Management', 'Quality Assurance') THEN 'Developer Tools'
    WHEN sub IN ('Identity and Access Management') THEN 'Identity'
    WHEN sub IN ('API Management', 'Messaging', 'Workflow Orchestration') THEN 'Integration'
    WHEN sub IN ('IoT Analytics', 'IoT Platforms') THEN 'Internet of Things'
    WHEN sub IN ('Architecture', 'Compliance', 'Cost Management', 'Data Governance', 'Disaster Recovery', 'Endpoint Management', 'Observability', 'Support') THEN 'Management and Governance'
    WHEN sub IN ('Content Creation', 'Gaming', 'Media Streaming', 'Mixed Reality') THEN 'Media'
    WHEN sub IN ('Data Migration', 'Resource Migration') THEN 'Migration'
    WHEN sub IN ('Multicloud Integration') THEN 'Multicloud'
    WHEN sub IN ('Application Networking', 'Content Delivery', 'Network Connectivity', 'Network Infrastructure', 'Network Routing', 'Network Security') THEN 'Networking'
    WHEN sub IN ('Secret Management', 'Security Posture Management', 'Threat Detection and Response') THEN 'Security'
    WHEN sub IN ('Backup Storage', 'Block Storage', 'File Storage', 'Object Storage', 'Storage Platforms') THEN 'Storage'
    WHEN sub IN ('Application Platforms') THEN 'Web'
    WHEN regexp_matches(sub, '^Other \((.+)\)$') AND regexp_extract(sub, '^Other \((.+)\)$', 1) IN (
        'AI and Machine Learning', 'Analytics', 'Business Applications', 'Compute', 'Databases', 'Developer Tools',
        'Identity', 'Integration', 'Internet of Things', 'Management and Governance', 'Media', 'Migration', 'Mobile',
        'Multicloud', 'Networking', 'Security', 'Storage', 'Web', 'Other') THEN regexp_extract(sub, '^Other \((.+)\)$', 1)
END;
-- The one ServiceCategory and ServiceSubcategory of each ServiceName (FOCUS ServiceName-C-005-C,
-- -C-008-C), from `counts` (core.service_names_by_billing_month: lines per month, name, category
-- and subcategory): the category most lines carry (ties: alphabetical); the subcategory most lines
-- carry among those FOCUS allows under that category (NULL where none is: core.cost_lines then
-- writes 'Other (<category>)'). Decided over every month, so a month built alone agrees with the rest.
CREATE OR REPLACE MACRO service_name_labels(counts) AS TABLE
WITH categories AS (
    SELECT ServiceName, ServiceCategory
    FROM (SELECT ServiceName, ServiceCategory, sum(lines) AS n FROM query_table(counts) GROUP BY ALL)
    QUALIFY row_number() OVER (PARTITION BY ServiceName ORDER BY n DESC, ServiceCategory) = 1
),
subcategories AS (
    SELECT ServiceName, ServiceSubcategory
    FROM (SELECT ServiceName, ServiceSubcategory, sum(lines) AS n
          FROM query_table(counts) JOIN categories AS k USING (ServiceName)
          WHERE focus_subcategory_parent(ServiceSubcategory) = k.ServiceCategory GROUP BY ALL)
    QUALIFY row_number() OVER (PARTITION BY ServiceName ORDER BY n DESC, ServiceSubcategory) = 1
)
SELECT k.ServiceName, k.ServiceCategory, s.ServiceSubcategory
FROM categories AS k LEFT JOIN subcategories AS s USING (ServiceName);
-- A unit in FOCUS's UnitFormat (`GB`, `GPU-Hours`, `GiB-Months`, `Requests/Second`): provider
-- spellings such as 'gibibyte month', 'GB-Month', 'OCPU Per Hour' or 'Lambda-GB-Seconds' become
-- the spec's form; a unit already in it is kept as it is.
CREATE OR REPLACE MACRO focus_time_unit(t, plural) AS
    CASE lower(t) WHEN 'yr' THEN 'Year' WHEN 'mo' THEN 'Month' WHEN 'hr' THEN 'Hour' WHEN 'hrs' THEN 'Hour'
                  WHEN 'sec' THEN 'Second' WHEN 'min' THEN 'Minute'
                  ELSE upper(t[1]) || lower(regexp_replace(t[2:], 's$', '')) END || CASE WHEN plural THEN 's' ELSE '' END;
CREATE OR REPLACE MACRO focus_unit_sizes(u) AS
    regexp_replace(regexp_replace(regexp_replace(regexp_replace(regexp_replace(regexp_replace(regexp_replace(regexp_replace(u,
        '(?i)\bkibibytes?\b', 'KiB', 'g'), '(?i)\bmebibytes?\b', 'MiB', 'g'), '(?i)\bgibibytes?\b', 'GiB', 'g'),
        '(?i)\btebibytes?\b', 'TiB', 'g'), '(?i)\bkilobytes?\b', 'KB', 'g'), '(?i)\bmegabytes?\b', 'MB', 'g'),
        '(?i)\bgigabytes?\b', 'GB', 'g'), '(?i)\bterabytes?\b', 'TB', 'g');
CREATE OR REPLACE MACRO focus_unit(unit) AS (
    -- A block ('10 Hours', '1000 Tokens') keeps its count before the unit in the spec's form; a
    -- block of one is the unit ('1 Hour' → 'Hours').
    -- One binding, as Spark's translation flattens it (pipelines/engines/spark_sql.py).
    WITH s AS (SELECT regexp_extract(trim(focus_unit_sizes(trim(unit))), '^([0-9]+)\s+', 1) AS block,
                      regexp_replace(trim(focus_unit_sizes(trim(unit))), '^[0-9]+\s+', '') AS u)
    SELECT CASE WHEN block IN ('', '1') THEN '' ELSE block || ' ' END || CASE
        WHEN u IS NULL OR u = '' THEN NULL
        -- '<unit>/<n> <Times>' ('Units/3 Months') is the spec's own form already.
        WHEN regexp_full_match(u, '[A-Za-z][A-Za-z0-9 ]*/[0-9]+ (Years|Months|Days|Hours|Minutes|Seconds)') THEN u
        WHEN regexp_full_match(u, '(?i)(year|month|day|hour|minute|second|yr|mo|hrs?|sec|min)s?')
            THEN focus_time_unit(u, true)
        -- '<unit> per <time>', '<unit>/<time>'  → '<unit>/<Time>'
        WHEN regexp_full_match(u, '(?i)(.+?)\s*(?:/|\s+per\s+)\s*(year|month|day|hour|minute|second)s?')
             AND NOT regexp_matches(regexp_extract(u, '(?i)(.+?)\s*(?:/|\s+per\s+)\s*(year|month|day|hour|minute|second)s?$', 1), '[-/]')
            THEN regexp_extract(u, '(?i)(.+?)\s*(?:/|\s+per\s+)\s*(year|month|day|hour|minute|second)s?$', 1) || '/'
                 || focus_time_unit(regexp_extract(u, '(?i)(.+?)\s*(?:/|\s+per\s+)\s*(year|month|day|hour|minute|second)s?$', 2), false)
        -- '<unit> <time>', '<unit>-<time>', 'Lambda-GB-Seconds', 'GiB/Second-Months' → '<unit>-<Times>'
        WHEN regexp_full_match(u, '(?i)(.+?)[\s-]+(year|month|day|hour|minute|second|hr|mo|yr)s?')
            THEN trim(regexp_replace(regexp_replace(
                     regexp_extract(u, '(?i)(.+?)[\s-]+(year|month|day|hour|minute|second|hr|mo|yr)s?$', 1), '/', ' Per ', 'g'), '[-\s]+', ' ', 'g'))
                 || '-' || focus_time_unit(regexp_extract(u, '(?i)(.+?)[\s-]+(year|month|day|hour|minute|second|hr|mo|yr)s?$', 2), true)
        ELSE u
    END FROM s
);
-- Whether an invoice issuer is the provider itself under its legal name ('Amazon Web Services
-- EMEA SARL' for AWS): then the issuer is the provider, not a third party (FOCUS BilledCost-C-005).
CREATE OR REPLACE MACRO focus_issuer_is_provider(provider, issuer) AS
    issuer = provider
    OR (provider = 'AWS' AND regexp_matches(issuer, '^(AWS|Amazon Web Services|Amazon\.com|Amazon Internet Services)\b'))
    OR (provider IN ('Microsoft', 'Azure') AND regexp_matches(issuer, '^Microsoft\b'))
    OR (provider IN ('Google Cloud', 'Google', 'GCP') AND regexp_matches(issuer, '^Google\b'))
    OR (provider IN ('Oracle', 'OCI') AND regexp_matches(issuer, '^Oracle\b'));
