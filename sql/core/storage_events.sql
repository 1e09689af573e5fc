-- core.storage_events: one checkpoint write or data transfer, from every storage file loaded.
CREATE OR REPLACE TABLE core.storage_events AS
SELECT e.*
FROM raw.storage_events AS e
JOIN raw.files AS f
  -- A log: the events of an earlier version of a file written again at its path still count.
  ON f.path = e.x_SourceFile AND f.sha256 = e.x_SourceSha256 AND f.status IN ('loaded', 'replaced')
QUALIFY row_number() OVER (PARTITION BY e.event_id ORDER BY e.x_IngestedAt DESC) = 1
ORDER BY started_at;
