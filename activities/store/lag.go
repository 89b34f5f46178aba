package store

import (
	"context"
	"fmt"
	"math"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// ParityLag is how far a channel (or one property on it) is behind the desired
// state, as the system of record holds it.
type ParityLag struct {
	Channel string `json:"channel"`
	// Property is set when the lag was asked for one property.
	Property string `json:"property_id,omitempty"`
	// Oldest is the age of the oldest desired change not acknowledged yet: how long
	// ago the oldest open batch with updates of the channel still without an outcome
	// was accepted; 0 when nothing is owed. For one property (Property set): the
	// age of the oldest desired change of its cells not acknowledged yet.
	Oldest time.Duration `json:"-"`
	// Pending counts those updates still without an outcome (per channel only).
	Pending int `json:"pending_updates"`
	// OwedCells counts, for one property, its cells (a night of a room type and
	// rate plan, per family) whose desired version the channel has not
	// acknowledged yet, from yesterday on; Oldest is then the age of the oldest
	// change among them (RecordDesired dates it).
	OwedCells int `json:"owed_cells"`
	// Acked counts the updates the channel acknowledged in the window; P50 and P99
	// are the quantiles of their time from the batch's acceptance to the channel's
	// acknowledgement (0 when Acked is 0), at most 19 % above the true value.
	Acked int           `json:"acked_updates"`
	P50   time.Duration `json:"-"`
	P99   time.Duration `json:"-"`
}

// lagBucket is the ack_lag bucket of latency d: up to 2^(b/4) ms.
func lagBucket(d time.Duration) int16 {
	ms := float64(d) / float64(time.Millisecond)
	if ms <= 1 {
		return 0
	}
	return int16(math.Min(math.Ceil(4*math.Log2(ms)), math.MaxInt16))
}

// lagOfBucket is the upper bound of bucket b.
func lagOfBucket(b int16) time.Duration {
	return time.Duration(math.Pow(2, float64(b)/4) * float64(time.Millisecond)).Round(time.Millisecond)
}

// lagOf is where RecordAcknowledged counts the updates of property on channel ch
// it commits now, for the first time, into the parity lag (insertOutcomesLag): the
// ack_lag rows of the channel and of the property, their latency the time since
// their batch was accepted. Two rows by key, the channel's first, so concurrent
// pushes lock them in one order; a retry commits nothing new and adds nothing.
func lagOf(now time.Time, batch batchRow, ch int16, property string) *lagBump {
	return &lagBump{channel: ch, property: property, minute: now.UTC().Truncate(time.Minute),
		bucket: lagBucket(now.Sub(batch.created))}
}

// lagKeep is how long ack_lag rows are kept: the longest window read, twice.
const lagKeep = 2 * time.Hour

// ParityLag reads the parity lag of every channel that has some (updates owed, or
// acknowledged within window), sorted by channel; with property set, of that
// property on every channel it owes cells to or was acknowledged on (OwedCells and
// Oldest from its cells, Pending 0: outcomes are kept per batch and channel, not
// per property). It also drops ack_lag rows older than two hours. Its statements
// read the open batches (batches_open) with their expected and recorded counts,
// and the ack_lag rows of the window: O(open batches × channels + minutes ×
// buckets), whatever the history kept; for a property, also its cells from
// yesterday on by primary key, a range per room rate and family: O(its room rates
// × families × nights ahead), whatever the other properties hold.
func (s *Store) ParityLag(ctx context.Context, window time.Duration, property string) ([]ParityLag, error) {
	now := s.now()
	by := map[string]*ParityLag{}
	get := func(slug string) *ParityLag {
		l := by[slug]
		if l == nil {
			l = &ParityLag{Channel: slug, Property: property}
			by[slug] = l
		}
		return l
	}
	if property == "" {
		rows, _ := s.pool.Query(ctx, `
SELECT ch.slug, min(b.created_at), sum(e.updates - d.n)::integer
FROM batches b
JOIN batch_expected e ON e.batch = b.id
JOIN channels ch ON ch.id = e.channel
CROSS JOIN LATERAL (SELECT coalesce(sum(c.n), 0) AS n FROM outcome_counts c
	WHERE c.batch = b.id AND c.channel = e.channel) d
WHERE b.released_at IS NULL AND b.planned_updates IS NOT NULL AND e.updates > d.n
GROUP BY 1`)
		var slug string
		var oldest time.Time
		var pending int
		if _, err := pgx.ForEachRow(rows, []any{&slug, &oldest, &pending}, func() error {
			l := get(slug)
			l.Oldest, l.Pending = max(now.Sub(oldest), 0), pending
			return nil
		}); err != nil {
			return nil, fmt.Errorf("parity lag: %w", err)
		}
	}
	if property != "" {
		if err := s.owedCells(ctx, property, now, get); err != nil {
			return nil, err
		}
	}
	rows, _ := s.pool.Query(ctx, `
SELECT ch.slug, l.bucket, sum(l.n)::integer
FROM ack_lag l JOIN channels ch ON ch.id = l.channel
WHERE l.property = $1 AND l.minute >= $2
GROUP BY 1, 2`, property, now.Add(-window).UTC().Truncate(time.Minute))
	hist := map[string][][2]int{}
	var slug string
	var bucket int16
	var n int
	if _, err := pgx.ForEachRow(rows, []any{&slug, &bucket, &n}, func() error {
		hist[slug] = append(hist[slug], [2]int{int(bucket), n})
		get(slug).Acked += n
		return nil
	}); err != nil {
		return nil, fmt.Errorf("parity lag: %w", err)
	}
	for slug, h := range hist {
		l := by[slug]
		l.P50, l.P99 = lagQuantile(h, l.Acked, 0.5), lagQuantile(h, l.Acked, 0.99)
	}
	if _, err := s.pool.Exec(ctx, `DELETE FROM ack_lag WHERE minute < $1`, now.Add(-lagKeep)); err != nil {
		return nil, fmt.Errorf("parity lag: prune: %w", err)
	}
	out := make([]ParityLag, 0, len(by))
	for _, l := range by {
		out = append(out, *l)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Channel < out[j].Channel })
	return out, nil
}

// lagQuantile is the q quantile of histogram h (bucket, count) of total counts:
// the upper bound of the bucket that holds it.
func lagQuantile(h [][2]int, total int, q float64) time.Duration {
	sort.Slice(h, func(i, j int) bool { return h[i][0] < h[j][0] })
	rank := int(math.Ceil(q * float64(total)))
	seen := 0
	for _, b := range h {
		if seen += b[1]; seen >= rank {
			return lagOfBucket(int16(b[0]))
		}
	}
	return 0
}

// owedCells adds property's owed cells, per channel, to the lags get returns: how
// many of its cells from yesterday on (a night before is past every channel's
// horizon) the channel has not acknowledged at the desired version, and the age of
// the oldest such change. The lateral join ranges on the primary key (room_rate,
// family, night) per room rate of the property and family; room_rates is small.
func (s *Store) owedCells(ctx context.Context, property string, now time.Time, get func(string) *ParityLag) error {
	rows, _ := s.pool.Query(ctx, `
SELECT ch.slug, min(c.owed_since), count(*)::integer
FROM room_rates r JOIN channels ch ON ch.id = r.channel
CROSS JOIN unnest(enum_range(NULL::family)) f
CROSS JOIN LATERAL (SELECT c.owed_since FROM cells c
	WHERE c.room_rate = r.id AND c.family = f AND c.night >= $2 AND c.acked_version < c.desired_version) c
WHERE r.property_id = $1
GROUP BY 1`, property, now.UTC().AddDate(0, 0, -1).Format(time.DateOnly))
	var slug string
	var since pgtype.Timestamptz
	var n int
	if _, err := pgx.ForEachRow(rows, []any{&slug, &since, &n}, func() error {
		l := get(slug)
		l.OwedCells = n
		if since.Valid {
			l.Oldest = max(now.Sub(since.Time), 0)
		}
		return nil
	}); err != nil {
		return fmt.Errorf("parity lag of %s: %w", property, err)
	}
	return nil
}
