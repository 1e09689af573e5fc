-- One unit of $from_currency in $to_currency: the newest rate on or before $day (any age: it scales
-- a threshold, or shows a 3-year projection, not a charge), and its date. No row when no rate links
-- the two currencies. Read by the anomalies' cost floor and the report's purchasing comparison.
SELECT rate, rate_date
FROM core.fx_rates
WHERE from_currency = $from_currency AND to_currency = $to_currency AND rate_date <= $day
ORDER BY rate_date DESC
LIMIT 1;
