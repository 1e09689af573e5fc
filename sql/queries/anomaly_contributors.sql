-- What moved in one anomalous series: its cost by resource, SKU and region on the anomalous day
-- ($day) against the mean of its baseline days ($baseline_days, $baseline_count of them billed),
-- the three largest movers per dimension. Usage charges only, spread over their charge period's
-- days, as in marts.daily_series.
WITH parts AS (
    SELECT a.x_ChargeId, a.method, a.amount_reporting, c.ChargePeriodStart, c.ChargePeriodEnd,
           coalesce(c.ResourceName, c.ResourceId, '(none)') AS resource,
           coalesce(c.SkuId, c.ChargeDescription, '(none)') AS sku,
           coalesce(c.RegionId, c.RegionName, '(none)') AS region
    FROM marts.cost_attribution AS a
    JOIN core.cost_lines AS c USING (x_ChargeId)
    WHERE c.ChargeCategory = 'Usage'
      AND c.ProviderName = $provider
      AND coalesce(c.SubAccountId, '(none)') = $sub_account
      AND coalesce(c.ServiceName, '(none)') = $service
      AND a.phase = $phase
),
lines AS (
    SELECT d.cd.day AS day,
           from_units(to_units(p.amount_reporting) * d.cd.seconds
                      // sum(d.cd.seconds) OVER (PARTITION BY p.x_ChargeId, p.method)) AS cost,  -- per part: a phase can have two
           p.resource, p.sku, p.region
    FROM parts AS p, unnest(charge_days(p.ChargePeriodStart, p.ChargePeriodEnd)) AS d(cd)
),
lines_on_days AS (
    SELECT * FROM lines WHERE day = $day OR list_contains($baseline_days::DATE[], day)
),
by_dimension AS (
    SELECT 'resource' AS dimension, resource AS value, day, cost FROM lines_on_days
    UNION ALL SELECT 'sku', sku, day, cost FROM lines_on_days
    UNION ALL SELECT 'region', region, day, cost FROM lines_on_days
),
moved AS (
    SELECT dimension, value,
           coalesce(sum(cost) FILTER (WHERE day = $day), 0) AS actual,
           from_micros(coalesce(sum(to_micros(cost)) FILTER (WHERE day <> $day), 0) // greatest($baseline_count, 1)) AS expected
    FROM by_dimension
    GROUP BY ALL
)
SELECT dimension, value, actual, expected, actual - expected AS change
FROM moved
WHERE actual <> expected
QUALIFY row_number() OVER (PARTITION BY dimension ORDER BY abs(actual - expected) DESC, value) <= 3
ORDER BY dimension, abs(actual - expected) DESC, value;
