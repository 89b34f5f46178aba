package store

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/paritysync/paritysync/models"
)

// MutationOutcome is the fate of one mutation's part in one endpoint family, or of
// the whole mutation when Family is empty (rejected before it was split).
type MutationOutcome struct {
	MutationID string         `json:"mutation_id"`
	Channel    string         `json:"channel"`
	Family     models.Family  `json:"family,omitempty"`
	Outcome    models.Outcome `json:"outcome"`
	// Reason says why for every outcome but committed: the rejection's problems, the
	// version that won, the dead-letter reason.
	Reason     string    `json:"reason,omitempty"`
	RecordedAt time.Time `json:"recorded_at"`
	// Night and Nights name one night of a range mutation (Nights > 0, the range's
	// night count): its end is kept per night, and the mutation's outcome is
	// recorded once every night has ended.
	Night  models.Date `json:"-"`
	Nights int         `json:"-"`
}

// outcomeRow is a MutationOutcome with its channel numbered.
type outcomeRow struct {
	mutationID string
	family     models.Family
	channel    int16
	outcome    models.Outcome
	reason     string
	// night and nights are set on a night of a range mutation (nights > 0): the
	// night's end is kept apart and the mutation's outcome folded from every
	// night's (foldRanges).
	night  models.Date
	nights int
}

// insertOutcomes records rows for batch; a (mutation, family) that already has an
// outcome in the batch keeps it. The same statement adds what it inserted to the
// batch's outcome_counts, so nothing ever counts a batch's outcomes. It returns how
// many rows it inserted, per outcome. O(len(rows)): one index probe per row.
func insertOutcomes(ctx context.Context, tx pgx.Tx, batch int64, rows []outcomeRow) (map[models.Outcome]int, error) {
	return insertOutcomesLag(ctx, tx, batch, rows, nil)
}

// lagBump is where the updates a statement commits for the first time count into
// the parity lag: the ack_lag rows of a channel and of one of its properties, for a
// minute and a latency bucket (recordLag's rows).
type lagBump struct {
	channel  int16
	property string
	minute   time.Time
	bucket   int16
}

// outcomeRows are the outcome rows (batch, mutation_id, family, channel, outcome,
// reason) of $2..$6 for batch $1.
const outcomeRows = `
	SELECT $1, * FROM unnest($2::text[], $3::text[]::family[], $4::smallint[], $5::text[]::outcome[], $6::text[])`

// outcomesWith inserts the outcome rows of source (outcomeRows' columns, batch $1)
// and bumps outcome_counts with them; lagSQL, when appended, adds those of channel
// $7 it committed to the ack_lag rows of the channel and of property $8 for minute
// $9 and bucket $10.
func outcomesWith(source string) string {
	return `
WITH ins AS (
	INSERT INTO outcomes (batch, mutation_id, family, channel, outcome, reason)` + source + `
	ON CONFLICT (batch, mutation_id, family) DO NOTHING
	RETURNING channel, outcome),
tally AS (SELECT channel, outcome, count(*)::integer AS n FROM ins GROUP BY 1, 2),
bump AS (
	INSERT INTO outcome_counts AS c (batch, channel, outcome, n)
	SELECT $1, channel, outcome, n FROM tally ORDER BY channel, outcome
	ON CONFLICT (batch, channel, outcome) DO UPDATE SET n = c.n + excluded.n
	RETURNING 1)`
}

const (
	// The count of bump makes every counter row locked before the lag rows, as
	// when they were two statements; the channel's lag row goes before the
	// property's (recordLag's order).
	lagSQL = `,
lag AS (
	INSERT INTO ack_lag AS l (property, channel, minute, bucket, n)
	SELECT k.property, $7::smallint, $9::timestamptz, $10::smallint, t.n
	FROM (SELECT sum(n)::integer AS n FROM tally WHERE channel = $7::smallint AND outcome = 'committed') t
	CROSS JOIN (SELECT count(*) FROM bump) counted
	CROSS JOIN unnest(ARRAY['', $8::text]) WITH ORDINALITY AS k(property, ord)
	WHERE t.n > 0
	ORDER BY k.ord
	ON CONFLICT (property, channel, minute, bucket) DO UPDATE SET n = l.n + excluded.n)`
	outcomesTallySQL = `
SELECT outcome::text, sum(n)::integer FROM tally GROUP BY 1`
)

// insertOutcomesLag is insertOutcomes that, with lag set, also counts the updates of
// lag's channel it committed into the parity lag, in the same statement: the hot
// counter rows of a channel are then held for one statement and the commit, not
// for a statement more.
func insertOutcomesLag(ctx context.Context, tx pgx.Tx, batch int64, rows []outcomeRow, lag *lagBump) (map[models.Outcome]int, error) {
	// Counter rows are locked in (channel, outcome) order in every writer, across
	// statements too, so two writers of one batch never deadlock on them.
	rows, err := foldRanges(ctx, tx, batch, rows)
	if err != nil {
		return nil, err
	}
	rows = slices.Clone(rows)
	slices.SortStableFunc(rows, func(a, b outcomeRow) int {
		return cmp.Or(cmp.Compare(a.channel, b.channel), cmp.Compare(a.outcome, b.outcome))
	})
	sql := outcomesWith(outcomeRows) + outcomesTallySQL
	if lag != nil {
		sql = outcomesWith(outcomeRows) + lagSQL + outcomesTallySQL
	}
	inserted := map[models.Outcome]int{}
	for len(rows) > 0 {
		chunk := rows[:min(rowsPerStatement, len(rows))]
		rows = rows[len(chunk):]
		ids := make([]string, len(chunk))
		fams := make([]pgtype.Text, len(chunk))
		chs := make([]int16, len(chunk))
		outs := make([]string, len(chunk))
		reasons := make([]pgtype.Text, len(chunk))
		for i, o := range chunk {
			ids[i], chs[i], outs[i] = o.mutationID, o.channel, string(o.outcome)
			fams[i] = pgtype.Text{String: string(o.family), Valid: o.family != ""}
			reasons[i] = pgtype.Text{String: o.reason, Valid: o.reason != ""}
		}
		args := []any{batch, ids, fams, chs, outs, reasons}
		if lag != nil {
			args = append(args, lag.channel, lag.property, lag.minute, lag.bucket)
		}
		got, _ := tx.Query(ctx, sql, args...)
		if err := addOutcomeCounts(got, inserted); err != nil {
			return nil, fmt.Errorf("record outcomes: %w", err)
		}
	}
	return inserted, nil
}

// storedCounts is what a writer of outcomes reports for rows: the stored count per
// outcome of their keys, the same on every retry. On a first attempt every key was
// inserted and the insert's own tally is the answer; only a retry reads the rows
// back, one index probe per key.
func storedCounts(ctx context.Context, tx dbtx, batch int64, rows []outcomeRow, inserted map[models.Outcome]int) (map[models.Outcome]int, error) {
	type key struct {
		id     string
		family models.Family
	}
	keys := make(map[key]struct{}, len(rows))
	for _, o := range rows {
		keys[key{o.mutationID, o.family}] = struct{}{}
	}
	n := 0
	for _, c := range inserted {
		n += c
	}
	if n == len(keys) {
		return inserted, nil
	}
	return countOutcomes(ctx, tx, batch, rows)
}

// countOutcomes counts the stored outcomes of rows' (mutation, family) keys. The
// lateral join keeps it to the index probes of the given keys (at most one row per
// family of a mutation), never the batch's other outcomes.
func countOutcomes(ctx context.Context, tx dbtx, batch int64, rows []outcomeRow) (map[models.Outcome]int, error) {
	ids := make([]string, len(rows))
	fams := make([]pgtype.Text, len(rows))
	for i, o := range rows {
		ids[i] = o.mutationID
		fams[i] = pgtype.Text{String: string(o.family), Valid: o.family != ""}
	}
	got, _ := tx.Query(ctx, `
SELECT o.outcome::text, count(*)
FROM (SELECT DISTINCT * FROM unnest($2::text[], $3::text[]::family[]) AS k(mutation_id, family)) k
CROSS JOIN LATERAL (SELECT outcome FROM outcomes o
	WHERE o.batch = $1 AND o.mutation_id = k.mutation_id AND o.family IS NOT DISTINCT FROM k.family) o
GROUP BY 1`, batch, ids, fams)
	counts := map[models.Outcome]int{}
	if err := addOutcomeCounts(got, counts); err != nil {
		return nil, fmt.Errorf("count outcomes: %w", err)
	}
	return counts, nil
}

// addOutcomeCounts adds rows of (outcome, count) to counts.
func addOutcomeCounts(rows pgx.Rows, counts map[models.Outcome]int) error {
	var outcome string
	var n int
	_, err := pgx.ForEachRow(rows, []any{&outcome, &n}, func() error {
		counts[models.Outcome(outcome)] += n
		return nil
	})
	return err
}

// RecordOutcomes records outcomes of batch batchID, each at most once: a (mutation,
// family) that already has an outcome in the batch keeps the first one, so a retried
// activity never records twice. PrepareBatch calls it for what it decides itself
// (rejected, superseded by RecordDesired or by Coalesce); the batch's cancellation
// calls it with cancelled for what was still waiting. RecordAcknowledged and
// ParkDeadLetter record their own outcomes. It returns the stored count per outcome
// of the given keys, the same on every retry.
func (s *Store) RecordOutcomes(ctx context.Context, batchID string, os []MutationOutcome) (map[models.Outcome]int, error) {
	if len(os) == 0 {
		return map[models.Outcome]int{}, nil
	}
	slugs := make([]string, 0, 4)
	for _, o := range os {
		if !slices.Contains(models.Outcomes, o.Outcome) {
			return nil, fmt.Errorf("record outcomes of %s: unknown outcome %q", batchID, o.Outcome)
		}
		if !slices.Contains(slugs, o.Channel) {
			slugs = append(slugs, o.Channel)
		}
	}
	batch, err := s.batchRef(ctx, batchID)
	if err != nil {
		return nil, err
	}
	chIDs, err := s.channelIDs(ctx, slugs...)
	if err != nil {
		return nil, err
	}
	rows := make([]outcomeRow, len(os))
	for i, o := range os {
		rows[i] = outcomeRow{mutationID: o.MutationID, family: o.Family, channel: chIDs[o.Channel],
			outcome: o.Outcome, reason: o.Reason, night: o.Night, nights: o.Nights}
	}
	var counts map[models.Outcome]int
	err = s.inTx(ctx, func(tx pgx.Tx) error {
		inserted, err := insertOutcomes(ctx, tx, batch, rows)
		if err != nil {
			return err
		}
		counts, err = storedCounts(ctx, tx, batch, rows, inserted)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("record outcomes of %s: %w", batchID, err)
	}
	return counts, nil
}

// Outcomes returns the outcomes of mutation mutationID in batch batchID, one per
// family (or one for the whole mutation); none while it is still on its way.
func (s *Store) Outcomes(ctx context.Context, batchID, mutationID string) ([]MutationOutcome, error) {
	rows, _ := s.pool.Query(ctx, `
SELECT o.mutation_id, ch.slug, coalesce(o.family::text, ''), o.outcome::text, coalesce(o.reason, ''), o.recorded_at
FROM outcomes o JOIN batches b ON b.id = o.batch JOIN channels ch ON ch.id = o.channel
WHERE b.batch_id = $1 AND o.mutation_id = $2
ORDER BY o.family NULLS FIRST`, batchID, mutationID)
	var out []MutationOutcome
	var o MutationOutcome
	var family, outcome string
	if _, err := pgx.ForEachRow(rows, []any{&o.MutationID, &o.Channel, &family, &outcome, &o.Reason, &o.RecordedAt}, func() error {
		o.Family, o.Outcome = models.Family(family), models.Outcome(outcome)
		out = append(out, o)
		return nil
	}); err != nil {
		return nil, fmt.Errorf("outcomes of %s in %s: %w", mutationID, batchID, err)
	}
	return out, nil
}

// BatchCounts tallies the recorded outcomes of a batch per channel, as the batch's
// status reports them: Total counts updates with an outcome, Rejected whole
// mutations. Operators and the end-to-end tests call it to check that a batch's
// outcomes add up. It reads the batch's outcome_counts (a row per channel and
// outcome), not its outcomes.
func (s *Store) BatchCounts(ctx context.Context, batchID string) ([]models.ChannelCounts, error) {
	rows, _ := s.pool.Query(ctx, `
SELECT ch.slug, c.outcome::text, c.n
FROM outcome_counts c JOIN batches b ON b.id = c.batch JOIN channels ch ON ch.id = c.channel
WHERE b.batch_id = $1`, batchID)
	by := map[string]*models.ChannelCounts{}
	var slug, outcome string
	var n int
	if _, err := pgx.ForEachRow(rows, []any{&slug, &outcome, &n}, func() error {
		c := by[slug]
		if c == nil {
			c = &models.ChannelCounts{Channel: slug}
			by[slug] = c
		}
		c.Total += n
		addOutcome(c, models.Outcome(outcome), n)
		return nil
	}); err != nil {
		return nil, fmt.Errorf("count outcomes of %s: %w", batchID, err)
	}
	out := make([]models.ChannelCounts, 0, len(by))
	for _, c := range by {
		out = append(out, *c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Channel < out[j].Channel })
	return out, nil
}

// OutcomesByMutation returns the outcomes of mutation mutationID in every batch
// whose id starts with batchPrefix (the burst smoothers' batches carry a webhook
// change under an id the PMS never sees), oldest first.
func (s *Store) OutcomesByMutation(ctx context.Context, batchPrefix, mutationID string) ([]MutationOutcome, error) {
	rows, _ := s.pool.Query(ctx, `
SELECT o.mutation_id, ch.slug, coalesce(o.family::text, ''), o.outcome::text, coalesce(o.reason, ''), o.recorded_at
FROM outcomes o JOIN batches b ON b.id = o.batch JOIN channels ch ON ch.id = o.channel
WHERE o.mutation_id = $2 AND starts_with(b.batch_id, $1)
ORDER BY o.recorded_at, o.family NULLS FIRST`, batchPrefix, mutationID)
	out, err := scanMutationOutcomes(rows, nil)
	if err != nil {
		return nil, fmt.Errorf("outcomes of %s: %w", mutationID, err)
	}
	return out, nil
}

// scanMutationOutcomes appends to out the rows of a query selecting mutation id,
// channel slug, family (empty for a whole mutation), outcome, reason and recorded_at.
func scanMutationOutcomes(rows pgx.Rows, out []MutationOutcome) ([]MutationOutcome, error) {
	var o MutationOutcome
	var family, outcome string
	_, err := pgx.ForEachRow(rows, []any{&o.MutationID, &o.Channel, &family, &outcome, &o.Reason, &o.RecordedAt}, func() error {
		o.Family, o.Outcome = models.Family(family), models.Outcome(outcome)
		out = append(out, o)
		return nil
	})
	return out, err
}

// addOutcome counts n updates with outcome o into c.
func addOutcome(c *models.ChannelCounts, o models.Outcome, n int) {
	switch o {
	case models.OutcomeCommitted:
		c.Committed += n
	case models.OutcomeSuperseded:
		c.Superseded += n
	case models.OutcomeRejected:
		c.Rejected += n
	case models.OutcomeDeadLettered:
		c.DeadLettered += n
	case models.OutcomeCancelled:
		c.Cancelled += n
	}
}
