package store

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/paritysync/paritysync/models"
)

// Ack is a channel's confirmation of a request, or of the lines of it that it
// accepted.
type Ack struct {
	BatchID        string
	Request        models.ChannelRequest
	ConfirmationID string
	// FailedLines are line indexes the channel refused (partial success); their refs
	// are neither acknowledged nor given an outcome here: the dead-letter activity
	// parks them.
	FailedLines []int
	// Superseded are refs of the request the ordering gate dropped before sending
	// (a newer version went out): recorded superseded in the same transaction.
	Superseded []models.MutationRef
}

// RecordAcknowledged records what the channel confirmed and the outcome of every
// accepted ref, in one transaction. PushRequest calls it after a 2xx (or the
// accepted part of a 207). A ref whose cell already holds a newer acknowledged
// version is superseded and leaves the acknowledged state alone; every other ref is
// committed. Calling it again for the same request (a retried activity) records
// nothing new and returns the same counts, read back from the stored outcomes. The
// counts include ack.Superseded. The updates it commits count into the parity lag
// (recordLag). With the room rates, batch and channel cached (every push after a
// worker's first), it is one transaction of statements by key:
// two on a first attempt (the cells with their confirmation, then the outcomes with
// their counters and lag), foldRanges' statements more for refs of night ranges,
// one more on a retry.
func (s *Store) RecordAcknowledged(ctx context.Context, ack Ack) (committed, superseded int, err error) {
	r := ack.Request
	rows := requestRows(r, ack.FailedLines)
	if len(rows) == 0 {
		return 0, 0, nil
	}
	fail := func(err error) (int, int, error) {
		return 0, 0, fmt.Errorf("record acknowledged %s/%s: %w", r.Channel, r.PropertyID, err)
	}
	if err := s.resolve(ctx, rows); err != nil {
		return fail(err)
	}
	batch, ch, err := s.batchRowChannel(ctx, ack.BatchID, r.Channel)
	if err != nil {
		return fail(err)
	}
	// last_night is the latest night the confirmation may stand for: Prune drops it
	// once that night is past retention, its cells gone with it.
	last := rows[0].night
	for _, row := range rows {
		if row.night.After(last) {
			last = row.night
		}
	}
	confArgs := []any{ch, ack.ConfirmationID, s.now(), last.Time()}
	// outs are the refs' outcomes, committed until their cell's write says otherwise;
	// cellOf is the row of each ref's cell (none for ack.Superseded).
	var outs []outcomeRow
	var cellOf []*cellRow
	for _, ref := range ack.Superseded {
		outs = append(outs, outcomeRow{mutationID: ref.ID, family: r.Family, channel: ch,
			outcome: models.OutcomeSuperseded, reason: "a newer version was sent", night: ref.StayDate, nights: ref.Nights})
		cellOf = append(cellOf, nil)
	}
	rowAt := make(map[cellKey]*cellRow, len(rows))
	for i := range rows {
		rowAt[cellKey{rows[i].cell(), r.Family}] = &rows[i]
	}
	for _, ref := range r.Refs {
		if slices.Contains(ack.FailedLines, ref.Line) || ref.Line < 0 || ref.Line >= len(r.Lines) {
			continue
		}
		l := r.Lines[ref.Line]
		c := models.Cell{Channel: r.Channel, PropertyID: r.PropertyID, RoomTypeCode: l.RoomTypeCode,
			RatePlanCode: l.RatePlanCode, StayDate: ref.StayDate}
		outs = append(outs, outcomeRow{mutationID: ref.ID, family: r.Family, channel: ch, outcome: models.OutcomeCommitted,
			night: ref.StayDate, nights: ref.Nights})
		cellOf = append(cellOf, rowAt[cellKey{c, r.Family}])
	}
	lag := lagOf(s.now(), batch, ch, r.PropertyID)
	if counts, ok, err := s.ackPipelined(ctx, batch.id, rows, confArgs, outs, cellOf, lag); ok || err != nil {
		if err != nil {
			return fail(err)
		}
		return counts[models.OutcomeCommitted], counts[models.OutcomeSuperseded], nil
	}
	won := map[cellKey]bool{}
	err = s.inTx(ctx, func(tx pgx.Tx) error {
		for _, chunk := range statements(rows) {
			var a cellArrays
			for _, row := range chunk {
				a.add(row)
			}
			// A request of more than one statement upserts its confirmation again,
			// to the same row.
			got, _ := tx.Query(ctx, ackCellsSQL+`
RETURNING room_rate, night`, append(a.args(), confArgs...)...)
			var id int32
			var night time.Time
			at := map[[2]int64]cellRow{}
			for _, row := range chunk {
				at[[2]int64{int64(row.id), row.night.Time().Unix()}] = row
			}
			if _, err := pgx.ForEachRow(got, []any{&id, &night}, func() error {
				row := at[[2]int64{int64(id), night.Unix()}]
				won[cellKey{row.cell(), r.Family}] = true
				return nil
			}); err != nil {
				return err
			}
		}
		outs := slices.Clone(outs)
		for i, row := range cellOf {
			if row != nil && !won[cellKey{row.cell(), r.Family}] {
				outs[i].outcome, outs[i].reason = models.OutcomeSuperseded, "a newer version was acknowledged"
			}
		}
		// Last: the outcome counters and the parity lag are rows every push of the
		// channel writes, locked from this statement to the commit.
		inserted, err := insertOutcomesLag(ctx, tx, batch.id, outs, lag)
		if err != nil {
			return err
		}
		counts, err := storedCounts(ctx, tx, batch.id, outs, inserted)
		committed, superseded = counts[models.OutcomeCommitted], counts[models.OutcomeSuperseded]
		return err
	})
	if err != nil {
		return fail(err)
	}
	return committed, superseded, nil
}

// ackCellsSQL writes acknowledged lines (cellArrays' args, $1..$12) and their
// confirmation (channel $13, code $14, none when empty, confirmed at $15, last
// night $16) in one statement: the confirmation is locked before the cells, as every
// writer does. A cell holding a newer acknowledged version is left alone.
const ackCellsSQL = `
WITH f AS (
	INSERT INTO confirmations AS f (channel, code, confirmed_at, last_night)
	SELECT $13::smallint, $14::text, $15::timestamptz, $16::date WHERE $14::text <> ''
	ON CONFLICT (channel, code) DO UPDATE SET last_night = greatest(f.last_night, excluded.last_night)
	RETURNING id)
INSERT INTO cells AS c (room_rate, family, night, acked_version, a_amount, a_currency, a_inventory,
	a_min_los, a_max_los, a_stop_sell, a_cta, a_ctd, sent_version, confirmation)
SELECT u.*, u.version, (SELECT id FROM f) FROM ` + unnestCells + `
ON CONFLICT (room_rate, family, night) DO UPDATE SET
	acked_version = excluded.acked_version, confirmation = excluded.confirmation,
	sent_version = greatest(c.sent_version, excluded.acked_version),
	a_amount = excluded.a_amount, a_currency = excluded.a_currency, a_inventory = excluded.a_inventory,
	a_min_los = excluded.a_min_los, a_max_los = excluded.a_max_los, a_stop_sell = excluded.a_stop_sell,
	a_cta = excluded.a_cta, a_ctd = excluded.a_ctd,
	owed_since = CASE WHEN excluded.acked_version >= c.desired_version THEN NULL ELSE c.owed_since END
WHERE c.acked_version <= excluded.acked_version`

// ackPipelined is RecordAcknowledged of a request whose cells and outcomes each fit
// one statement and that ends no night of a range: its two statements go to the
// server at once, in one implicit transaction (one round trip, not a transaction's
// four). The outcome statement reads whether each ref's cell now holds the version
// this request wrote (the first statement's row locks hold until the commit): a
// cell a newer acknowledgement holds is superseded. ok is false, with nothing
// written, when the request needs RecordAcknowledged's transaction.
func (s *Store) ackPipelined(ctx context.Context, batch int64, rows []cellRow, confArgs []any,
	outs []outcomeRow, cellOf []*cellRow, lag *lagBump) (counts map[models.Outcome]int, ok bool, err error) {
	if len(rows) > rowsPerStatement || len(outs) > rowsPerStatement || len(outs) == 0 {
		return nil, false, nil
	}
	for _, o := range outs {
		if o.nights > 0 && o.family != "" {
			return nil, false, nil
		}
	}
	var a cellArrays
	for _, row := range rows {
		a.add(row)
	}
	// The counter rows are locked in (channel, outcome) order by the statement
	// itself (outcomesWith's bump).
	n := len(outs)
	ids, fams, chs := make([]string, n), make([]pgtype.Text, n), make([]int16, n)
	outcomes, reasons := make([]string, n), make([]pgtype.Text, n)
	roomRates, nights, versions := make([]pgtype.Int4, n), make([]pgtype.Date, n), make([]pgtype.Int8, n)
	for i, o := range outs {
		ids[i], chs[i], outcomes[i] = o.mutationID, o.channel, string(o.outcome)
		fams[i] = pgtype.Text{String: string(o.family), Valid: o.family != ""}
		reasons[i] = pgtype.Text{String: o.reason, Valid: o.reason != ""}
		if row := cellOf[i]; row != nil {
			roomRates[i] = pgtype.Int4{Int32: row.id, Valid: true}
			nights[i] = pgtype.Date{Time: row.night.Time(), Valid: true}
			versions[i] = pgtype.Int8{Int64: row.line.Version, Valid: true}
		}
	}
	var b pgx.Batch
	b.Queue(ackCellsSQL, append(a.args(), confArgs...)...)
	b.Queue(outcomesWith(ackOutcomesSource)+lagSQL+outcomesTallySQL, batch, ids, fams, chs, outcomes, reasons,
		lag.channel, lag.property, lag.minute, lag.bucket, roomRates, nights, versions)
	br := s.pool.SendBatch(ctx, &b)
	defer func() {
		if cerr := br.Close(); err == nil && cerr != nil {
			err = cerr
		}
	}()
	if _, err := br.Exec(); err != nil {
		return nil, true, err
	}
	got, _ := br.Query()
	inserted := map[models.Outcome]int{}
	if err := addOutcomeCounts(got, inserted); err != nil {
		return nil, true, fmt.Errorf("record outcomes: %w", err)
	}
	// Committed first: a retry reads back what was stored before.
	if err := br.Close(); err != nil {
		return nil, true, err
	}
	counts, err = storedCounts(ctx, s.pool, batch, outs, inserted)
	return counts, true, err
}

// ackOutcomesSource is outcomesWith's rows for ackPipelined: $2..$6 as in
// outcomeRows, and per ref its cell ($11 room rate, $12 night, $13 the version the
// request wrote; null for a ref with no cell): a committed ref whose cell holds
// another acknowledged version now is superseded.
const ackOutcomesSource = `
	SELECT $1, k.mutation_id, k.family, k.channel,
		CASE WHEN k.outcome = 'committed' AND c.acked_version IS DISTINCT FROM k.version
			THEN 'superseded'::outcome ELSE k.outcome END,
		CASE WHEN k.outcome = 'committed' AND c.acked_version IS DISTINCT FROM k.version
			THEN 'a newer version was acknowledged' ELSE k.reason END
	FROM unnest($2::text[], $3::text[]::family[], $4::smallint[], $5::text[]::outcome[], $6::text[],
		$11::integer[], $12::date[], $13::bigint[])
		AS k(mutation_id, family, channel, outcome, reason, room_rate, night, version)
	LEFT JOIN cells c ON c.room_rate = k.room_rate AND c.family = k.family AND c.night = k.night`
