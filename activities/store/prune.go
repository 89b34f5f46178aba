package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Retention says how long each kind of state is kept; see README.md.
type Retention struct {
	// Nights keeps cells whose night is at most this long ago: a stay date that has
	// passed can no longer be sold, so its state only serves disputes.
	Nights time.Duration
	// Payloads keeps the payload and stored requests of batches created at most this
	// long ago; a finished batch releases them at once (ReleaseBatch).
	Payloads time.Duration
	// Outcomes keeps batches and their per-mutation outcomes.
	Outcomes time.Duration
	// DeadLetters keeps acknowledged dead letters; open ones stay until acknowledged.
	DeadLetters time.Duration
}

// DefaultRetention keeps nights, outcomes and acknowledged dead letters 35 days and
// the payloads of unfinished batches 7 days, as the Redis store did.
func DefaultRetention() Retention {
	const day = 24 * time.Hour
	return Retention{Nights: 35 * day, Payloads: 7 * day, Outcomes: 35 * day, DeadLetters: 35 * day}
}

// Pruned counts the rows Prune deleted.
type Pruned struct {
	Cells, Confirmations, Payloads, Requests, Parts, Batches, DeadLetters int64
}

// Prune deletes what outlived its retention; a daily schedule calls it. It is safe to
// run at any time and from several workers.
func (s *Store) Prune(ctx context.Context, r Retention) (Pruned, error) {
	var p Pruned
	now := s.now()
	steps := []struct {
		n    *int64
		sql  string
		keep time.Duration
	}{
		// The night is a calendar date (UTC, as models.Date), whatever the session's
		// time zone. Naming every room rate and family makes it one range of the
		// primary key per (room rate, family): the statement reads what it deletes
		// and one probe per room rate, not the table.
		{&p.Cells, `DELETE FROM cells WHERE room_rate = ANY (ARRAY(SELECT id FROM room_rates))
			AND family = ANY (enum_range(NULL::family))
			AND night < ($1::timestamptz AT TIME ZONE 'UTC')::date`, r.Nights},
		// A confirmation stands for nights up to its last_night: once that is past
		// retention, every cell that could refer to it was deleted just above.
		{&p.Confirmations, `DELETE FROM confirmations WHERE last_night < ($1::timestamptz AT TIME ZONE 'UTC')::date`, r.Nights},
		{&p.Payloads, `UPDATE batches SET payload = NULL WHERE created_at < $1 AND payload IS NOT NULL`, r.Payloads},
		// From the requests' side: they are few (a batch releases its own when it
		// ends), the batches many. The same for the parts of batches written in parts.
		{&p.Requests, `DELETE FROM batch_requests q WHERE EXISTS (
			SELECT 1 FROM batches b WHERE b.id = q.batch AND b.created_at < $1)`, r.Payloads},
		{&p.Parts, `DELETE FROM batch_parts q WHERE EXISTS (
			SELECT 1 FROM batches b WHERE b.id = q.batch AND b.created_at < $1)`, r.Payloads},
		{&p.Batches, `DELETE FROM batches WHERE created_at < $1`, r.Outcomes},
		{&p.DeadLetters, `DELETE FROM dead_letters WHERE acked_at < $1`, r.DeadLetters},
	}
	for _, st := range steps {
		if st.keep <= 0 {
			continue
		}
		err := s.inTx(ctx, func(tx pgx.Tx) error {
			tag, err := tx.Exec(ctx, st.sql, now.Add(-st.keep))
			*st.n = tag.RowsAffected()
			return err
		})
		if err != nil {
			return p, fmt.Errorf("prune: %w", err)
		}
	}
	return p, nil
}
