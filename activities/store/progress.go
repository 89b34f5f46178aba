package store

import (
	"context"
	"fmt"
	"sort"

	"github.com/jackc/pgx/v5"

	"github.com/paritysync/paritysync/models"
)

// RecordExpected records how many updates batchID has per channel (what PrepareBatch
// decided itself and what it handed to chunks), so that its progress reads done of
// total from the store. A retried PrepareBatch records the same numbers again,
// replacing the first ones.
func (s *Store) RecordExpected(ctx context.Context, batchID string, updates map[string]int) error {
	batch, err := s.batchRef(ctx, batchID)
	if err != nil {
		return err
	}
	slugs := make([]string, 0, len(updates))
	total := 0
	for ch, n := range updates {
		slugs = append(slugs, ch)
		total += n
	}
	chIDs, err := s.channelIDs(ctx, slugs...)
	if err != nil {
		return err
	}
	err = s.inTx(ctx, func(tx pgx.Tx) error {
		for ch, n := range updates {
			if _, err := tx.Exec(ctx, `
INSERT INTO batch_expected (batch, channel, updates) VALUES ($1, $2, $3)
ON CONFLICT (batch, channel) DO UPDATE SET updates = excluded.updates`, batch, chIDs[ch], n); err != nil {
				return err
			}
		}
		_, err := tx.Exec(ctx, `UPDATE batches SET planned_updates = $2 WHERE id = $1`, batch, total)
		return err
	})
	if err != nil {
		return fmt.Errorf("record expected updates of %s: %w", batchID, err)
	}
	return nil
}

// Progress is a batch's per-update progress as the system of record holds it.
type Progress struct {
	// Channels count per channel: Total is the updates the batch has (as
	// PrepareBatch planned them, never fewer than the outcomes recorded), the
	// others the outcomes recorded so far.
	Channels []models.ChannelCounts
	// Planned is set once PrepareBatch recorded the batch's updates: before, the
	// totals are only the outcomes recorded.
	Planned bool
}

// Done reports whether every update of a planned batch has its outcome.
func (p Progress) Done() bool {
	if !p.Planned {
		return false
	}
	for _, c := range p.Channels {
		if c.Done() < c.Total {
			return false
		}
	}
	return true
}

// BatchProgress reads a batch's progress: its outcome_counts and batch_expected rows,
// in one statement that counts no outcome, so a follower may poll it every second.
// An unknown batch has no channels and is not planned.
func (s *Store) BatchProgress(ctx context.Context, batchID string) (Progress, error) {
	rows, _ := s.pool.Query(ctx, `
SELECT ch.slug, c.outcome::text, c.n, b.planned_updates IS NOT NULL
FROM outcome_counts c JOIN batches b ON b.id = c.batch JOIN channels ch ON ch.id = c.channel
WHERE b.batch_id = $1
UNION ALL
SELECT ch.slug, 'expected', e.updates, true
FROM batch_expected e JOIN batches b ON b.id = e.batch JOIN channels ch ON ch.id = e.channel
WHERE b.batch_id = $1
UNION ALL
SELECT '', 'planned', 0, true FROM batches WHERE batch_id = $1 AND planned_updates IS NOT NULL`, batchID)
	var p Progress
	by := map[string]*models.ChannelCounts{}
	expected := map[string]int{}
	var slug, outcome string
	var n int
	var planned bool
	if _, err := pgx.ForEachRow(rows, []any{&slug, &outcome, &n, &planned}, func() error {
		p.Planned = p.Planned || planned
		switch outcome {
		case "planned":
			return nil
		case "expected":
			expected[slug] = n
		}
		c := by[slug]
		if c == nil {
			c = &models.ChannelCounts{Channel: slug}
			by[slug] = c
		}
		addOutcome(c, models.Outcome(outcome), n)
		return nil
	}); err != nil {
		return p, fmt.Errorf("progress of %s: %w", batchID, err)
	}
	p.Channels = make([]models.ChannelCounts, 0, len(by))
	for ch, c := range by {
		// Rejections recorded beside the plan (intake's refused rows) are updates
		// of the batch too: the total never falls below the outcomes.
		c.Total = max(expected[ch], c.Done())
		p.Channels = append(p.Channels, *c)
	}
	sort.Slice(p.Channels, func(i, j int) bool { return p.Channels[i].Channel < p.Channels[j].Channel })
	return p, nil
}
