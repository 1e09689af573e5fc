-- core.gpu_samples: one GPU at one instant, from every telemetry file currently loaded.
-- The same sample exported twice (overlapping scrapes) is kept once.
CREATE OR REPLACE TABLE core.gpu_samples AS
SELECT s.*
FROM raw.gpu_samples AS s
JOIN raw.files AS f
  ON f.path = s.x_SourceFile AND f.sha256 = s.x_SourceSha256 AND f.status = 'loaded'
QUALIFY row_number() OVER (
    PARTITION BY s.host, coalesce(s.gpu_uuid, ''), coalesce(s.gpu_index, -1), s.ts, coalesce(s.util_kind, '')
    ORDER BY s.x_IngestedAt, s.x_SourceFile, s.x_SourceRow
) = 1;
