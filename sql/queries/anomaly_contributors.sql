-- What moved in one anomalous series: its cost by resource, SKU and region on the anomalous day
-- ($day) against the mean of its baseline days ($baseline_days, $baseline_count of them billed),
-- the three largest movers per dimension. Usage charges only, as in marts.daily_series.
WITH lines AS (
    SELECT a.charge_day AS day,
           a.amount_reporting AS cost,
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
      AND (a.charge_day = $day OR list_contains($baseline_days::DATE[], a.charge_day))
),
by_dimension AS (
    SELECT 'resource' AS dimension, resource AS value, day, cost FROM lines
    UNION ALL SELECT 'sku', sku, day, cost FROM lines
    UNION ALL SELECT 'region', region, day, cost FROM lines
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
