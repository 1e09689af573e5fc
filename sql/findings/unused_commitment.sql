-- findings.unused_commitment: commitments (savings plans, reserved instances, committed use) and
-- capacity reservations for anything but GPUs that went unused: FOCUS lines whose
-- CommitmentDiscountStatus or CapacityReservationStatus is 'Unused'. GPU ones (a GPU model or
-- count on the line) are findings.unused_gpu's, since their remedy is moving GPU jobs onto them.
-- One row per line; the whole unused amount was paid for nothing, so all of it is avoidable.
CREATE OR REPLACE TABLE findings.unused_commitment AS
SELECT 'unused_commitment' AS kind,
       CASE WHEN CommitmentDiscountStatus = 'Unused' THEN 'commitment' ELSE 'capacity_reservation' END AS subkind,
       coalesce(CommitmentDiscountId, CapacityReservationId, ResourceId) AS resource, NULL AS host,
       ChargePeriodStart AS period_start, ChargePeriodEnd AS period_end,
       EffectiveCost AS wasted_cost, EffectiveCost AS avoidable_cost, BillingCurrency AS currency, 'charge' AS price_source,
       json_object('provider', ProviderName, 'service', ServiceName, 'commitment_name', CommitmentDiscountName,
                   'commitment_type', CommitmentDiscountType, 'commitment_status', CommitmentDiscountStatus,
                   'capacity_reservation_status', CapacityReservationStatus, 'charge_id', x_ChargeId) AS evidence,
       printf('%s (%s) went unused in this period. Move matching workloads onto it, or buy less at renewal.',
              coalesce(CommitmentDiscountName, CommitmentDiscountId, CapacityReservationId, ResourceId),
              coalesce(ServiceName, ProviderName, 'commitment')) AS recommendation
FROM core.cost_lines
WHERE (CommitmentDiscountStatus = 'Unused' OR CapacityReservationStatus = 'Unused') AND EffectiveCost <> 0
  AND x_GpuModel IS NULL AND coalesce(x_GpuCount, 0) = 0;
