-- A batch that ends without its FinishBatch (terminated from the UI or the CLI,
-- failed, timed out) would stay running in the listing. Intake's sweeper describes
-- the batches still running whose last look is older than its interval and records
-- how those that ended did: checked_at is that last look (NULL: none since the batch
-- was created). batches_running holds only the running batches (few), in the order
-- the sweeper takes them.
ALTER TABLE batches ADD COLUMN checked_at timestamptz;
CREATE INDEX batches_running ON batches ((coalesce(checked_at, created_at))) WHERE state = 'running';
