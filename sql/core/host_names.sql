-- core.host_names: the host telemetry and workloads name a billed resource by, where its bill names
-- it otherwise. An AWS instance is billed as i-0abc… while nvidia-smi and dcgm-exporter on it report
-- its hostname (ip-10-0-1-23): linked here, its GPU charges meet that host's telemetry and workloads
-- (marts.gpu_hour_prices, marts.cost_attribution, marts.gpu_hours_profile, and the findings
-- through them; the host its bill names still meets its telemetry too), so its idle cards are
-- priced at what the instance was paid and its hours are no longer unmonitored. One host per
-- resource:
--   * the user's files (`--host-names`, repeatable: CSVs of host and resource_id, or the JSON of
--     `aws ec2 describe-instances` or `kubectl get nodes -o json`; models/host_names.py), first;
--   * else the workloads naming both a host and the resource id (a workload file's resource_id
--     column), the host of the latest of them.
-- A host is compared as telemetry's is (norm_host: lower case, the domain dropped).
-- Input: host_names_input (host, resource_id, source).
CREATE OR REPLACE TABLE core.host_names AS
WITH stated AS (
    SELECT resource_id, norm_host(host) AS host, source FROM host_names_input
)
SELECT resource_id, host, source FROM stated
UNION ALL
SELECT resource_id, arg_max(norm_host(host), started_at) AS host, 'workloads' AS source
FROM core.workloads
WHERE resource_id IS NOT NULL AND host IS NOT NULL AND norm_host(host) <> norm_host(resource_id)
  AND resource_id NOT IN (SELECT resource_id FROM stated)
GROUP BY resource_id
ORDER BY resource_id;
