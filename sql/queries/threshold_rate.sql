-- One unit of $from_currency in $to_currency: the newest rate on or before $day (any age: it
-- scales a threshold, not an amount). No row when no rate links the two currencies.
SELECT rate
FROM core.fx_rates
WHERE from_currency = $from_currency AND to_currency = $to_currency AND rate_date <= $day
ORDER BY rate_date DESC
LIMIT 1;
