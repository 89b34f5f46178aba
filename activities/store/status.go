package store

import (
	"context"
	"fmt"
)

// OpenDeadLetters counts the dead letters not acknowledged yet, per channel (only
// channels that have some). One statement over dead_letters_open: the open
// entries, never the acknowledged ones kept for 35 days.
func (s *Store) OpenDeadLetters(ctx context.Context) (map[string]int, error) {
	rows, _ := s.pool.Query(ctx, `
SELECT ch.slug, count(*)::integer FROM dead_letters d JOIN channels ch ON ch.id = d.channel
WHERE d.acked_at IS NULL GROUP BY 1`)
	out := map[string]int{}
	if err := collectPairs(rows, out); err != nil {
		return nil, fmt.Errorf("count open dead letters: %w", err)
	}
	return out, nil
}
