-- Parity lag per property: since when a cell's desired state has been ahead of what
-- its channel acknowledged. RecordDesired sets it when a cell goes from in parity
-- (acked_version >= desired_version) to owed, and keeps it while a newer version
-- arrives before the channel caught up, so it dates the oldest change still owed;
-- RecordAcknowledged clears it once the channel has the desired version, so a cell
-- in parity carries no date (a bit of the null bitmap, not 8 bytes).
-- It is read only for owed cells, and no index holds it: a desired write stays a
-- HOT update. Cells owed before this migration have none (counted, not dated).
ALTER TABLE cells ADD COLUMN owed_since timestamptz;
