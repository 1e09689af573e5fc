-- core.workloads: one job or service. A workload exported again keeps its latest version.
CREATE OR REPLACE TABLE core.workloads AS
SELECT w.*
FROM raw.workloads AS w
JOIN raw.files AS f
  ON f.path = w.x_SourceFile AND f.sha256 = w.x_SourceSha256 AND f.status = 'loaded'
QUALIFY row_number() OVER (PARTITION BY w.workload_id ORDER BY w.x_IngestedAt DESC, w.x_SourceRow DESC) = 1
ORDER BY started_at, workload_id;
