package store

import (
	"context"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/paritysync/paritysync/models"
)

// BatchOutcomes calls fn with every recorded outcome of batch batchID, or only those
// that are outcome when it is not empty, ordered by mutation id and family. The
// operator CLI lists a batch's rejections with it, all of them.
func (s *Store) BatchOutcomes(ctx context.Context, batchID string, outcome models.Outcome, fn func(MutationOutcome) error) error {
	if outcome != "" && !slices.Contains(models.Outcomes, outcome) {
		return fmt.Errorf("outcomes of %s: unknown outcome %q", batchID, outcome)
	}
	rows, _ := s.pool.Query(ctx, `
SELECT o.mutation_id, ch.slug, coalesce(o.family::text, ''), o.outcome::text, coalesce(o.reason, ''), o.recorded_at
FROM outcomes o JOIN batches b ON b.id = o.batch JOIN channels ch ON ch.id = o.channel
WHERE b.batch_id = $1 AND ($2 = '' OR o.outcome::text = $2)
ORDER BY o.mutation_id, o.family NULLS FIRST`, batchID, string(outcome))
	var o MutationOutcome
	var family, out string
	if _, err := pgx.ForEachRow(rows, []any{&o.MutationID, &o.Channel, &family, &out, &o.Reason, &o.RecordedAt}, func() error {
		o.Family, o.Outcome = models.Family(family), models.Outcome(out)
		return fn(o)
	}); err != nil {
		return fmt.Errorf("outcomes of %s: %w", batchID, err)
	}
	return nil
}

// CancelPending records the outcome cancelled, with reason, for every update of
// batch batchID's stored requests that has no outcome yet; updates that already have
// one keep it. The batch's cancellation calls it once its children stopped. It
// returns how many of the stored requests' updates are cancelled, the same on a
// retry.
func (s *Store) CancelPending(ctx context.Context, batchID, reason string) (int, error) {
	rows, _ := s.pool.Query(ctx, `
SELECT q.body FROM batch_requests q JOIN batches b ON b.id = q.batch
WHERE b.batch_id = $1 ORDER BY q.channel, q.priority, q.chunk, q.idx`, batchID)
	var pending []MutationOutcome
	var body []byte
	if _, err := pgx.ForEachRow(rows, []any{&body}, func() error {
		var r models.ChannelRequest
		if err := inflate(body, &r); err != nil {
			return err
		}
		for _, ref := range r.Refs {
			pending = append(pending, MutationOutcome{MutationID: ref.ID, Channel: r.Channel, Family: r.Family,
				Outcome: models.OutcomeCancelled, Reason: reason, Night: ref.StayDate, Nights: ref.Nights})
		}
		return nil
	}); err != nil {
		return 0, fmt.Errorf("cancel %s: %w", batchID, err)
	}
	counts, err := s.RecordOutcomes(ctx, batchID, pending)
	if err != nil {
		return 0, err
	}
	return counts[models.OutcomeCancelled], nil
}
