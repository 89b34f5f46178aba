-- Parity lag: how long a desired change takes to reach its channel.
-- A batch is open until ReleaseBatch marks it released, so the age of the oldest
-- change still owed reads the open batches (few) by batches_open, not the 35 days
-- of batches kept. Batches done before this migration count as released.
ALTER TABLE batches ADD COLUMN released_at timestamptz;
UPDATE batches b SET released_at = b.created_at
WHERE b.created_at < now() - interval '7 days'
   OR (b.planned_updates IS NOT NULL
       AND b.planned_updates <= (SELECT coalesce(sum(n), 0) FROM outcome_counts c WHERE c.batch = b.id));
CREATE INDEX batches_open ON batches (created_at) WHERE released_at IS NULL;

-- Per minute, how many updates the channel acknowledged how long after their batch
-- was accepted (created_at): bucket b holds latencies up to 2^(b/4) ms, so a
-- quantile read from it is at most 19 % high. property '' is the whole channel; a
-- push adds to its channel's row and its property's. The worker drops rows older
-- than two hours (ack_lag_minute) when it reads them; a row is one (property,
-- channel, minute, bucket), so the table holds O(properties pushed × 120 × a few).
CREATE TABLE ack_lag (
    property text        NOT NULL,
    channel  smallint    NOT NULL REFERENCES channels,
    minute   timestamptz NOT NULL,
    bucket   smallint    NOT NULL,
    n        integer     NOT NULL,
    PRIMARY KEY (property, channel, minute, bucket)
);
CREATE INDEX ack_lag_minute ON ack_lag (minute);
