-- Every statement on the push and prune paths reads by an index (see
-- TestStatementsUseIndexes). The cells statements enumerate families to range on the
-- primary key (room_rate, family, night) and need no index of their own.

-- Prune drops a confirmation once the last night it confirmed is past retention:
-- by then every cell that could refer to it is gone, and nothing scans cells.
ALTER TABLE confirmations ADD COLUMN last_night date;
UPDATE confirmations f SET last_night = m.night
FROM (SELECT confirmation, max(night) AS night FROM cells WHERE confirmation IS NOT NULL GROUP BY 1) m
WHERE m.confirmation = f.id;
-- Confirmations no cell refers to any more go with the next prune.
UPDATE confirmations SET last_night = '-infinity' WHERE last_night IS NULL;
ALTER TABLE confirmations ALTER COLUMN last_night SET NOT NULL;
CREATE INDEX confirmations_last_night ON confirmations (last_night);

-- Prune's retention of batches, and of the payloads not released yet (few).
CREATE INDEX batches_created_at ON batches (created_at);
CREATE INDEX batches_pending ON batches (created_at) WHERE payload IS NOT NULL;
-- Prune's retention of acknowledged dead letters (open ones are dead_letters_open).
CREATE INDEX dead_letters_acked ON dead_letters (acked_at) WHERE acked_at IS NOT NULL;
