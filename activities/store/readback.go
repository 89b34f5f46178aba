package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/paritysync/paritysync/models"
)

// ChannelProperties lists, in order, up to limit properties of channel after the
// property after ("" for the first page): the pages reconciliation reads a channel
// back in. It reads the (channel, property_id, …) unique index of room_rates, so a
// page costs its own rows whatever the size of the channel.
func (s *Store) ChannelProperties(ctx context.Context, channel, after string, limit int) ([]string, error) {
	rows, _ := s.pool.Query(ctx, `
SELECT DISTINCT r.property_id FROM room_rates r JOIN channels ch ON ch.id = r.channel
WHERE ch.slug = $1 AND r.property_id > $2
ORDER BY r.property_id LIMIT $3`, channel, after, limit)
	props, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("list properties of %s: %w", channel, err)
	}
	return props, nil
}

// SaveBatchPart stores part of batch batchID's mutations under the name part,
// replacing what an earlier call stored under that name (no mutations drops it), so a
// retried writer that writes its parts again leaves each once. The parts join the batch's payload in
// part order when SealBatch has made the batch loadable.
func (s *Store) SaveBatchPart(ctx context.Context, batchID, part string, ms []models.Mutation) error {
	if len(ms) == 0 {
		if _, err := s.pool.Exec(ctx, `
DELETE FROM batch_parts WHERE batch = (SELECT id FROM batches WHERE batch_id = $1) AND part = $2`, batchID, part); err != nil {
			return fmt.Errorf("drop part %s of batch %s: %w", part, batchID, err)
		}
		return nil
	}
	body, err := deflate(ms)
	if err != nil {
		return fmt.Errorf("encode part %s of batch %s: %w", part, batchID, err)
	}
	batch, err := s.batchRef(ctx, batchID)
	if err != nil {
		return err
	}
	if _, err := s.pool.Exec(ctx, `
INSERT INTO batch_parts (batch, part, mutations, payload) VALUES ($1, $2, $3, $4)
ON CONFLICT (batch, part) DO UPDATE SET mutations = excluded.mutations, payload = excluded.payload`,
		batch, part, len(ms), body); err != nil {
		return fmt.Errorf("save part %s of batch %s: %w", part, batchID, err)
	}
	return nil
}

// SealBatch makes a batch written with SaveBatchPart loadable and returns the key
// BatchSyncInput.PayloadKey carries, as SaveBatch does for a batch written whole;
// the batch counts the mutations of every part.
func (s *Store) SealBatch(ctx context.Context, batchID string) (string, error) {
	empty, err := deflate([]models.Mutation{})
	if err != nil {
		return "", err
	}
	tag, err := s.pool.Exec(ctx, `
UPDATE batches b SET payload = $2,
	mutations = (SELECT coalesce(sum(p.mutations), 0) FROM batch_parts p WHERE p.batch = b.id)
WHERE b.batch_id = $1`, batchID, empty)
	if err == nil && tag.RowsAffected() == 0 {
		err = errors.New("no parts were saved")
	}
	if err != nil {
		return "", fmt.Errorf("seal batch %s: %w", batchID, err)
	}
	return models.BatchWorkflowID(batchID), nil
}

// loadParts appends the parts of batch batchID, in part order, to ms.
func (s *Store) loadParts(ctx context.Context, batchID string, ms []models.Mutation) ([]models.Mutation, error) {
	rows, _ := s.pool.Query(ctx, `
SELECT p.payload FROM batch_parts p JOIN batches b ON b.id = p.batch
WHERE b.batch_id = $1 ORDER BY p.part`, batchID)
	var body []byte
	_, err := pgx.ForEachRow(rows, []any{&body}, func() error {
		var part []models.Mutation
		if err := inflate(body, &part); err != nil {
			return err
		}
		ms = append(ms, part...)
		return nil
	})
	return ms, err
}

// PropertyCellStates is CellStates for one property of the channel: one page of a
// read-back. It reads the cells of that property's room rates only.
func (s *Store) PropertyCellStates(ctx context.Context, channel, property string, from, to models.Date, fn func(CellState) error) error {
	rows, _ := s.pool.Query(ctx, cellStatesSelect+`
WHERE ch.slug = $1 AND r.property_id = $4 AND c.night BETWEEN $2 AND $3
ORDER BY r.property_id, r.room_type, r.rate_plan, c.night, c.family`, channel, from.Time(), to.Time(), property)
	if err := s.scanCellStates(rows, channel, fn); err != nil {
		return fmt.Errorf("read cells of %s/%s: %w", channel, property, err)
	}
	return nil
}
