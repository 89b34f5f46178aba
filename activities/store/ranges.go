package store

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/paritysync/paritysync/models"
)

// RangeMutation is a range mutation PrepareBatch expanded: its id, how many nights
// it has after clipping, and which nights were clipped ("" when none).
type RangeMutation struct {
	MutationID string
	Nights     int
	Clipped    string
}

// RecordRanges records the range mutations of batch batchID before any of their
// nights ends; a retry keeps the first record.
func (s *Store) RecordRanges(ctx context.Context, batchID string, rs []RangeMutation) error {
	if len(rs) == 0 {
		return nil
	}
	batch, err := s.batchRef(ctx, batchID)
	if err != nil {
		return err
	}
	ids := make([]string, len(rs))
	nights := make([]int32, len(rs))
	clipped := make([]pgtype.Text, len(rs))
	for i, r := range rs {
		ids[i], nights[i] = r.MutationID, int32(r.Nights)
		clipped[i] = pgtype.Text{String: r.Clipped, Valid: r.Clipped != ""}
	}
	if _, err := s.pool.Exec(ctx, `
INSERT INTO range_mutations (batch, mutation_id, nights, clipped)
SELECT $1, * FROM unnest($2::text[], $3::integer[], $4::text[])
ON CONFLICT DO NOTHING`, batch, ids, nights, clipped); err != nil {
		return fmt.Errorf("record ranges of %s: %w", batchID, err)
	}
	return nil
}

// foldRanges records the nights among rows (those with nights > 0) in range_nights
// and returns the other rows, plus the outcome of every (mutation, family) whose
// nights have now all ended. It locks the range's row first, in id order, so two
// writers ending the last nights of one range never both miss the fold.
func foldRanges(ctx context.Context, tx pgx.Tx, batch int64, rows []outcomeRow) ([]outcomeRow, error) {
	var plain, nights []outcomeRow
	for _, o := range rows {
		if o.nights > 0 && o.family != "" {
			nights = append(nights, o)
		} else {
			plain = append(plain, o)
		}
	}
	if len(nights) == 0 {
		return rows, nil
	}
	type key struct {
		id     string
		family models.Family
	}
	channel := map[key]int16{}
	var ids []string
	count := map[string]int32{}
	for _, o := range nights {
		channel[key{o.mutationID, o.family}] = o.channel
		if _, ok := count[o.mutationID]; !ok {
			ids = append(ids, o.mutationID)
		}
		count[o.mutationID] = int32(o.nights)
	}
	slices.Sort(ids)
	counts := make([]int32, len(ids))
	for i, id := range ids {
		counts[i] = count[id]
	}
	// A range PrepareBatch did not record (it always does) gets its row here.
	if _, err := tx.Exec(ctx, `
INSERT INTO range_mutations (batch, mutation_id, nights)
SELECT $1, * FROM unnest($2::text[], $3::integer[]) ON CONFLICT DO NOTHING`, batch, ids, counts); err != nil {
		return nil, fmt.Errorf("record range nights: %w", err)
	}
	if _, err := tx.Exec(ctx, `
SELECT 1 FROM range_mutations WHERE batch = $1 AND mutation_id = ANY($2) ORDER BY mutation_id FOR UPDATE`,
		batch, ids); err != nil {
		return nil, fmt.Errorf("lock ranges: %w", err)
	}
	n := len(nights)
	mids, fams, outs := make([]string, n), make([]string, n), make([]string, n)
	days := make([]time.Time, n)
	reasons := make([]pgtype.Text, n)
	for i, o := range nights {
		mids[i], fams[i], outs[i], days[i] = o.mutationID, string(o.family), string(o.outcome), o.night.Time()
		reasons[i] = pgtype.Text{String: o.reason, Valid: o.reason != ""}
	}
	if _, err := tx.Exec(ctx, `
INSERT INTO range_nights (batch, mutation_id, family, night, outcome, reason)
SELECT $1, * FROM unnest($2::text[], $3::text[]::family[], $4::date[], $5::text[]::outcome[], $6::text[])
ON CONFLICT DO NOTHING`, batch, mids, fams, days, outs, reasons); err != nil {
		return nil, fmt.Errorf("record range nights: %w", err)
	}
	// Each (mutation, family) whose nights have all ended, with their ends; the
	// outcomes insert keeps the first fold of a key, so a retry adds nothing.
	got, _ := tx.Query(ctx, `
SELECT n.mutation_id, n.family::text, coalesce(r.clipped, ''),
	array_agg(n.outcome::text ORDER BY n.night), array_agg(n.night ORDER BY n.night),
	array_agg(coalesce(n.reason, '') ORDER BY n.night)
FROM range_nights n JOIN range_mutations r USING (batch, mutation_id)
WHERE n.batch = $1 AND (n.mutation_id, n.family) IN (SELECT DISTINCT * FROM unnest($2::text[], $3::text[]::family[]))
GROUP BY n.mutation_id, n.family, r.nights, r.clipped
HAVING count(*) >= r.nights`, batch, mids, fams)
	var id, fam, clipped string
	var os, rs []string
	var ds []time.Time
	if _, err := pgx.ForEachRow(got, []any{&id, &fam, &clipped, &os, &ds, &rs}, func() error {
		ns := make([]rangeNight, len(os))
		for i := range os {
			ns[i] = rangeNight{night: models.DateOf(ds[i]), outcome: models.Outcome(os[i]), reason: rs[i]}
		}
		k := key{id, models.Family(fam)}
		o, reason := foldOutcome(ns, clipped)
		plain = append(plain, outcomeRow{mutationID: id, family: k.family, channel: channel[k], outcome: o, reason: reason})
		return nil
	}); err != nil {
		return nil, fmt.Errorf("fold range nights: %w", err)
	}
	return plain, nil
}

// rangeNight is one ended night of a range mutation's family.
type rangeNight struct {
	night   models.Date
	outcome models.Outcome
	reason  string
}

// foldOutcome is the one outcome of a range mutation's family from the ends of its
// nights: dead-lettered if any night was, else cancelled if any was, else
// committed if any was, else superseded. The reason lists the nights that ended
// otherwise than the outcome, and the clipped nights.
func foldOutcome(ns []rangeNight, clipped string) (models.Outcome, string) {
	rank := map[models.Outcome]int{models.OutcomeDeadLettered: 4, models.OutcomeCancelled: 3,
		models.OutcomeCommitted: 2, models.OutcomeSuperseded: 1}
	worst := models.OutcomeSuperseded
	for _, n := range ns {
		if rank[n.outcome] > rank[worst] {
			worst = n.outcome
		}
	}
	by := map[models.Outcome][]rangeNight{}
	for _, n := range ns {
		by[n.outcome] = append(by[n.outcome], n)
	}
	var parts []string
	order := []models.Outcome{models.OutcomeDeadLettered, models.OutcomeCancelled, models.OutcomeCommitted, models.OutcomeSuperseded}
	for _, o := range order {
		list := by[o]
		if len(list) == 0 || (o == worst && o == models.OutcomeCommitted) {
			continue
		}
		part := fmt.Sprintf("%d of %d nights %s: %s", len(list), len(ns), o, nightList(list))
		if list[0].reason != "" {
			part += " (" + list[0].reason + ")"
		}
		parts = append(parts, part)
	}
	if clipped != "" {
		parts = append(parts, clipped)
	}
	return worst, strings.Join(parts, "; ")
}

// maxListedNights bounds the nights a reason names one by one.
const maxListedNights = 10

// nightList names the nights of ns, the first maxListedNights of them.
func nightList(ns []rangeNight) string {
	ns = slices.Clone(ns)
	slices.SortFunc(ns, func(a, b rangeNight) int { return cmp.Compare(a.night.String(), b.night.String()) })
	var b strings.Builder
	for i, n := range ns {
		if i == maxListedNights {
			fmt.Fprintf(&b, " and %d more", len(ns)-i)
			break
		}
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(n.night.String())
	}
	return b.String()
}
