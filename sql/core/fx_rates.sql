-- core.fx_rates: one row per day, currency pair and rate. 1 unit of from_currency = rate units of
-- to_currency, to 12 decimals. Quoted rates come from the bundled reference file and the user's own file (which
-- wins on the same day and pair); inverse and USD-cross rates are derived so any pair converts.
-- Input: fx_rates_input (rate_date, from_currency, to_currency, rate, source, priority).
CREATE OR REPLACE TABLE core.fx_rates AS
WITH quoted AS (
    SELECT CAST(rate_date AS DATE) AS rate_date,
           upper(trim(from_currency)) AS from_currency,
           upper(trim(to_currency)) AS to_currency,
           CAST(rate AS DECIMAL(38, 12)) AS rate,
           source,
           priority
    FROM fx_rates_input
    WHERE CAST(rate AS DECIMAL(38, 12)) > 0
),
inverse AS (
    SELECT rate_date, to_currency, from_currency,
           from_rate_units(CAST(1000000000000000000000000 AS HUGEINT) // rate_units(rate)),
           source || ' (inverse)', priority + 10
    FROM quoted
),
cross_usd AS (
    SELECT a.rate_date, a.to_currency, b.to_currency,
           from_rate_units(rate_units(b.rate) * 1000000000000 // rate_units(a.rate)),
           'cross via USD: ' || a.source, greatest(a.priority, b.priority) + 20
    FROM quoted a
    JOIN quoted b ON a.rate_date = b.rate_date AND a.from_currency = 'USD' AND b.from_currency = 'USD'
    WHERE a.to_currency <> b.to_currency
),
candidates AS (
    SELECT * FROM quoted
    UNION ALL SELECT * FROM inverse
    UNION ALL SELECT * FROM cross_usd
)
SELECT rate_date, from_currency, to_currency, rate, source
FROM candidates
QUALIFY row_number() OVER (PARTITION BY rate_date, from_currency, to_currency ORDER BY priority, source) = 1
ORDER BY rate_date, from_currency, to_currency;
