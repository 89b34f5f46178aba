package store

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/shopspring/decimal"

	"github.com/paritysync/paritysync/models"
)

// cellRow is one (cell, family) write: its key and the one-night line carrying the
// version and values.
type cellRow struct {
	rr     roomRate
	family models.Family
	night  models.Date
	line   models.ARILine
	id     int32 // room_rates.id, filled by resolve
}

// resolve fills the room rate ids of rows and sorts them by key, so that every writer
// locks rows in the same order and two batches never deadlock.
func (s *Store) resolve(ctx context.Context, rows []cellRow) error {
	ids := map[roomRate]int32{}
	for _, r := range rows {
		ids[r.rr] = 0
	}
	if err := s.roomRateIDs(ctx, ids); err != nil {
		return err
	}
	for i := range rows {
		rows[i].id = ids[rows[i].rr]
	}
	sortRows(rows)
	return nil
}

// sortRows orders rows by key, the order every writer locks them in.
func sortRows(rows []cellRow) {
	slices.SortStableFunc(rows, func(a, b cellRow) int {
		return cmp.Or(cmp.Compare(a.id, b.id), cmp.Compare(a.family, b.family),
			a.night.Time().Compare(b.night.Time()))
	})
}

// errUncached says a transaction met a room rate with no id at hand.
var errUncached = errors.New("room rate not numbered yet")

// resolveKnown is resolve without a statement: from known, then the cache. It
// returns false, leaving rows unsorted, when a room rate of rows has no id there,
// after adding it to known with id 0 for the caller to number.
func (s *Store) resolveKnown(rows []cellRow, known map[roomRate]int32) bool {
	whole := true
	s.mu.Lock()
	for i, r := range rows {
		id := known[r.rr]
		if id == 0 {
			id = s.roomRates[r.rr]
		}
		if id == 0 {
			known[r.rr], whole = 0, false
		}
		rows[i].id = id
	}
	s.mu.Unlock()
	if whole {
		sortRows(rows)
	}
	return whole
}

// cellArrays are cell rows as the column arrays one unnest statement takes.
type cellArrays struct {
	roomRate []int32
	family   []string
	night    []time.Time
	version  []int64
	values   []valueColumns
}

func (a *cellArrays) add(r cellRow) {
	a.roomRate = append(a.roomRate, r.id)
	a.family = append(a.family, string(r.family))
	a.night = append(a.night, r.night.Time())
	a.version = append(a.version, r.line.Version)
	a.values = append(a.values, columnsOf(r.line.Values))
}

// args are the arrays in the order of the unnest below.
func (a *cellArrays) args() []any {
	n := len(a.values)
	amount, currency := make([]pgtype.Text, n), make([]pgtype.Text, n)
	inventory, minLOS, maxLOS := make([]pgtype.Int2, n), make([]pgtype.Int2, n), make([]pgtype.Int2, n)
	stopSell, cta, ctd := make([]pgtype.Bool, n), make([]pgtype.Bool, n), make([]pgtype.Bool, n)
	for i, v := range a.values {
		amount[i], currency[i], inventory[i], minLOS[i], maxLOS[i] = v.amount, v.currency, v.inventory, v.minLOS, v.maxLOS
		stopSell[i], cta[i], ctd[i] = v.stopSell, v.cta, v.ctd
	}
	return []any{a.roomRate, a.family, a.night, a.version, amount, currency, inventory, minLOS, maxLOS, stopSell, cta, ctd}
}

// valueColumns are a line's Values as the value columns of a cells row, in the
// order every statement here names them: amount, currency, inventory, min_los,
// max_los, stop_sell, cta, ctd (d_… for the desired line, a_… for the acked one).
type valueColumns struct {
	amount, currency          pgtype.Text
	inventory, minLOS, maxLOS pgtype.Int2
	stopSell, cta, ctd        pgtype.Bool
}

func columnsOf(v models.Values) valueColumns {
	c := valueColumns{currency: pgtype.Text{String: v.Currency, Valid: v.Currency != ""},
		inventory: int2(v.Inventory), minLOS: int2(v.MinLOS), maxLOS: int2(v.MaxLOS),
		stopSell: boolean(v.StopSell), cta: boolean(v.CTA), ctd: boolean(v.CTD)}
	if v.Amount != nil {
		c.amount = pgtype.Text{String: v.Amount.String(), Valid: true}
	}
	return c
}

// dest are the scan destinations of the columns, in their order.
func (c *valueColumns) dest() []any {
	return []any{&c.amount, &c.currency, &c.inventory, &c.minLOS, &c.maxLOS, &c.stopSell, &c.cta, &c.ctd}
}

// values are the scanned columns as Values, with pointers of their own.
func (c *valueColumns) values() (models.Values, error) {
	v := models.Values{Currency: c.currency.String, Inventory: intPtr(c.inventory), MinLOS: intPtr(c.minLOS),
		MaxLOS: intPtr(c.maxLOS), StopSell: boolPtr(c.stopSell), CTA: boolPtr(c.cta), CTD: boolPtr(c.ctd)}
	if c.amount.Valid {
		d, err := decimal.NewFromString(c.amount.String)
		if err != nil {
			return v, fmt.Errorf("amount %q: %w", c.amount.String, err)
		}
		v.Amount = &d
	}
	return v, nil
}

// unnestCells turns the args of cellArrays into rows (room_rate, family, night,
// version, amount, currency, inventory, min_los, max_los, stop_sell, cta, ctd).
const unnestCells = `unnest($1::integer[], $2::text[]::family[], $3::date[], $4::bigint[],
	$5::text[]::numeric[], $6::text[], $7::smallint[], $8::smallint[], $9::smallint[],
	$10::boolean[], $11::boolean[], $12::boolean[])
	AS u(room_rate, family, night, version, amount, currency, inventory, min_los, max_los, stop_sell, cta, ctd)`

func int2(p *int) pgtype.Int2 {
	if p == nil {
		return pgtype.Int2{}
	}
	return pgtype.Int2{Int16: int16(*p), Valid: true}
}

func boolean(p *bool) pgtype.Bool {
	if p == nil {
		return pgtype.Bool{}
	}
	return pgtype.Bool{Bool: *p, Valid: true}
}

// statements cuts rows into statements of at most rowsPerStatement.
func statements(rows []cellRow) [][]cellRow {
	var out [][]cellRow
	for len(rows) > 0 {
		n := min(rowsPerStatement, len(rows))
		out = append(out, rows[:n])
		rows = rows[n:]
	}
	return out
}

// RecordDesired records, per cell and family, the newest version the PMS asked for
// and its values; an older version never overwrites a newer one, whichever writer
// comes first. PrepareBatch calls it with the validated mutations before coalescing.
// It returns the family parts of ms older than the desired state now recorded (a
// newer version arrived earlier, in this batch or another): the caller drops them
// (Mutation.Without) and records them as superseded. Parts at the recorded version
// are not stale: a retried PrepareBatch, or a repair at the desired version, goes on.
func (s *Store) RecordDesired(ctx context.Context, ms []models.Mutation) ([]models.Superseded, error) {
	type part struct {
		m int
		f models.Family
	}
	var parts []part
	winner := map[cellKey]int{} // index into rows
	var rows []cellRow
	for i, m := range ms {
		for _, f := range m.Families() {
			parts = append(parts, part{i, f})
			k := cellKey{m.Cell(), f}
			w, ok := winner[k]
			switch {
			case !ok:
				winner[k] = len(rows)
				rows = append(rows, cellRow{rr: roomRateOf(m.Cell()), family: f, night: m.StayDate, line: m.Line(f)})
			case m.Version >= rows[w].line.Version:
				// At equal versions the later mutation wins, as in Coalesce.
				rows[w].line = m.Line(f)
			}
		}
	}
	if len(rows) == 0 {
		return nil, nil
	}
	if err := s.resolve(ctx, rows); err != nil {
		return nil, fmt.Errorf("record desired: %w", err)
	}
	recorded := make(map[cellKey]int64, len(rows))
	for _, chunk := range statements(rows) {
		var a cellArrays
		for _, r := range chunk {
			a.add(r)
		}
		err := s.inTx(ctx, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `
INSERT INTO cells AS c (room_rate, family, night, desired_version, d_amount, d_currency, d_inventory,
	d_min_los, d_max_los, d_stop_sell, d_cta, d_ctd, owed_since)
SELECT *, $13::timestamptz FROM `+unnestCells+`
ON CONFLICT (room_rate, family, night) DO UPDATE SET desired_version = excluded.desired_version,
	d_amount = excluded.d_amount, d_currency = excluded.d_currency, d_inventory = excluded.d_inventory,
	d_min_los = excluded.d_min_los, d_max_los = excluded.d_max_los, d_stop_sell = excluded.d_stop_sell,
	d_cta = excluded.d_cta, d_ctd = excluded.d_ctd,
	owed_since = CASE WHEN c.acked_version >= c.desired_version THEN excluded.owed_since
		ELSE coalesce(c.owed_since, excluded.owed_since) END
WHERE c.desired_version < excluded.desired_version`, append(a.args(), s.now())...); err != nil {
				return err
			}
			got, _ := tx.Query(ctx, `
SELECT k.i, c.desired_version
FROM unnest($1::integer[], $2::text[]::family[], $3::date[]) WITH ORDINALITY AS k(room_rate, family, night, i)
JOIN cells c USING (room_rate, family, night)`, a.roomRate, a.family, a.night)
			var i, v int64
			_, err := pgx.ForEachRow(got, []any{&i, &v}, func() error {
				r := chunk[i-1]
				recorded[cellKey{r.cell(), r.family}] = v
				return nil
			})
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("record desired: %w", err)
		}
	}
	var stale []models.Superseded
	for _, p := range parts {
		m := ms[p.m]
		if by := recorded[cellKey{m.Cell(), p.f}]; by > m.Version {
			stale = append(stale, models.Superseded{ID: m.ID, Channel: m.Channel, Family: p.f, Version: m.Version, By: by,
				StayDate: m.RangeNight(), Nights: m.RangeNights})
		}
	}
	return stale, nil
}

// cellKey is the unit of last-writer-wins.
type cellKey struct {
	cell   models.Cell
	family models.Family
}

func (r cellRow) cell() models.Cell {
	return models.Cell{Channel: r.rr.channel, PropertyID: r.rr.property, RoomTypeCode: r.rr.room,
		RatePlanCode: r.rr.plan, StayDate: r.night}
}

// requestRows are the cell rows of request r, one per ref whose line is not in skip;
// where two refs name the same cell the newer version is kept.
func requestRows(r models.ChannelRequest, skip []int) []cellRow {
	rows := make([]cellRow, 0, len(r.Refs))
	at := map[cellKey]int{}
	for _, ref := range r.Refs {
		if slices.Contains(skip, ref.Line) || ref.Line < 0 || ref.Line >= len(r.Lines) {
			continue
		}
		l := r.Lines[ref.Line]
		l.From, l.To, l.Version = ref.StayDate, ref.StayDate, ref.Version
		row := cellRow{rr: roomRate{r.Channel, r.PropertyID, l.RoomTypeCode, l.RatePlanCode},
			family: r.Family, night: ref.StayDate, line: l}
		k := cellKey{row.cell(), r.Family}
		if i, ok := at[k]; ok {
			if ref.Version > rows[i].line.Version {
				rows[i] = row
			}
			continue
		}
		at[k] = len(rows)
		rows = append(rows, row)
	}
	return rows
}

// RecordSent records that request r was admitted to its channel: per night, the
// newest version sent. It is an upper bound of what went out: PushRequest records a
// request before it asks the limiter (RecordSending), so that the gate can be
// rebuilt from SentVersions after a Redis loss and never let an older version
// follow a newer one, and nothing but the HTTP write stands between the limiter's
// grant and the call.
func (s *Store) RecordSent(ctx context.Context, r models.ChannelRequest) error {
	rows := requestRows(r, nil)
	if len(rows) == 0 {
		return nil
	}
	if err := s.resolve(ctx, rows); err != nil {
		return fmt.Errorf("record sent %s/%s: %w", r.Channel, r.PropertyID, err)
	}
	if err := upsertSent(ctx, s.pool, rows); err != nil {
		return fmt.Errorf("record sent %s/%s: %w", r.Channel, r.PropertyID, err)
	}
	return nil
}

// upsertSent raises the sent version of rows (resolved) on q; O(rows), by key.
func upsertSent(ctx context.Context, q dbtx, rows []cellRow) error {
	for _, chunk := range statements(rows) {
		var a cellArrays
		for _, row := range chunk {
			a.add(row)
		}
		if _, err := q.Exec(ctx, `
INSERT INTO cells AS c (room_rate, family, night, sent_version)
SELECT * FROM unnest($1::integer[], $2::text[]::family[], $3::date[], $4::bigint[])
ON CONFLICT (room_rate, family, night) DO UPDATE SET sent_version = excluded.sent_version
WHERE c.sent_version < excluded.sent_version`, a.roomRate, a.family, a.night, a.version); err != nil {
			return err
		}
	}
	return nil
}

// RecordSending is what PushRequest writes before it asks the limiter for request
// index of chunk chunkKey: the request as sent (RecordSent), read first unless the
// caller has it (known), together with the requests ahead that the caller will need
// next (the lane's next request), in one transaction — one statement when there is
// nothing to read. It returns the request and those of ahead that exist; a request
// that does not is ErrBatchNotFound as for Request.
func (s *Store) RecordSending(ctx context.Context, chunkKey string, index int, known *models.ChannelRequest,
	ahead ...int) (models.ChannelRequest, map[int]models.ChannelRequest, error) {
	var need []int
	if known == nil {
		need = append(need, index)
	}
	need = append(need, ahead...)
	fail := func(err error) (models.ChannelRequest, map[int]models.ChannelRequest, error) {
		return models.ChannelRequest{}, nil, fmt.Errorf("record sending %d of %s: %w", index, chunkKey, err)
	}
	var ref chunkRef
	if len(need) > 0 {
		var err error
		if ref, err = parseChunkKey(chunkKey); err != nil {
			return fail(errors.Join(err, ErrBatchNotFound))
		}
	}
	var req models.ChannelRequest
	var got map[int]models.ChannelRequest
	ids := map[roomRate]int32{}
	write := func(q dbtx) error {
		if len(need) > 0 {
			var err error
			if got, err = readRequests(ctx, q, ref, need); err != nil {
				return err
			}
		}
		if known != nil {
			req = *known
		} else if r, ok := got[index]; ok {
			req = r
			delete(got, index)
		} else {
			return ErrBatchNotFound
		}
		rows := requestRows(req, nil)
		if len(rows) == 0 {
			return nil
		}
		if _, inTx := q.(pgx.Tx); inTx {
			// Inside the transaction only the cache may answer: numbering a new room
			// rate takes a second connection, and with every connection held by a
			// transaction waiting for one, the pool would stall until the deadline.
			if !s.resolveKnown(rows, ids) {
				return errUncached
			}
		} else if err := s.resolve(ctx, rows); err != nil {
			return err
		}
		return upsertSent(ctx, q, rows)
	}
	var err error
	if known != nil && len(need) > 0 {
		// Only the requests ahead to read, which nothing writes once stored: the
		// write and the read are one statement (one round trip, not a transaction's
		// four), unless the room rates need numbering or the rows more than one.
		var done bool
		if got, done, err = s.sendingAndAhead(ctx, *known, ref, need); done || err != nil {
			if err != nil {
				return fail(err)
			}
			return *known, got, nil
		}
	}
	if len(need) == 0 {
		err = write(s.pool)
	} else {
		err = s.inTx(ctx, func(tx pgx.Tx) error { return write(tx) })
		if errors.Is(err, errUncached) {
			// Number the room rates outside any transaction, then write again: once
			// per room rate a worker has not seen yet.
			if err = s.roomRateIDs(ctx, ids); err == nil {
				err = s.inTx(ctx, func(tx pgx.Tx) error { return write(tx) })
			}
		}
	}
	if err != nil {
		return fail(err)
	}
	return req, got, nil
}

// sendingAndAhead is RecordSending of a request the caller has, with the requests
// idx of chunk ref read in the same statement. done is false, with nothing written,
// when that takes more than one statement (a room rate this worker has not numbered
// yet, more rows than one statement carries): RecordSending's transaction does it.
func (s *Store) sendingAndAhead(ctx context.Context, req models.ChannelRequest, ref chunkRef,
	idx []int) (map[int]models.ChannelRequest, bool, error) {
	rows := requestRows(req, nil)
	if len(rows) == 0 || len(rows) > rowsPerStatement || !s.resolveKnown(rows, map[roomRate]int32{}) {
		return nil, false, nil
	}
	var a cellArrays
	for _, row := range rows {
		a.add(row)
	}
	got, _ := s.pool.Query(ctx, `
WITH sent AS (
	INSERT INTO cells AS c (room_rate, family, night, sent_version)
	SELECT * FROM unnest($1::integer[], $2::text[]::family[], $3::date[], $4::bigint[])
	ON CONFLICT (room_rate, family, night) DO UPDATE SET sent_version = excluded.sent_version
	WHERE c.sent_version < excluded.sent_version)`+requestsSQL(5),
		append([]any{a.roomRate, a.family, a.night, a.version}, requestsArgs(ref, idx)...)...)
	out, err := scanRequests(got, len(idx))
	return out, true, err
}

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
	var outcome string
	var k int
	if _, err := pgx.ForEachRow(got, []any{&outcome, &k}, func() error {
		inserted[models.Outcome(outcome)] += k
		return nil
	}); err != nil {
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

// CellState is what the store knows of one cell and family.
type CellState struct {
	Cell   models.Cell
	Family models.Family
	// Desired is the newest version the PMS asked for and its values as a one-night
	// line; Version 0 when none was recorded.
	Desired models.ARILine
	// SentVersion is the newest version admitted to the channel, 0 when none.
	SentVersion int64
	// Acked is what the channel confirmed last; Version 0 when nothing was.
	Acked          models.ARILine
	ConfirmationID string
	ConfirmedAt    time.Time
}

// Drifted reports whether the channel has not confirmed the desired version yet.
func (c CellState) Drifted() bool { return c.Desired.Version > c.Acked.Version }

// CellStates calls fn with every cell and family of channel whose night lies in
// [from, to], sorted by property, room type, rate plan, night and family, so that a
// caller can read one property back from the channel at a time. Reconciliation calls
// it to compare the channel with the desired state (including cells that were never
// acknowledged) and re-send the desired values at their versions. Naming every
// family lets each room rate's read range on the whole primary key (room_rate,
// family, night), and each cell's confirmation is one probe: the read costs the
// cells it returns, not every night of the channel's room rates.
func (s *Store) CellStates(ctx context.Context, channel string, from, to models.Date, fn func(CellState) error) error {
	rows, _ := s.pool.Query(ctx, cellStatesSelect+`
WHERE ch.slug = $1 AND c.night BETWEEN $2 AND $3
ORDER BY r.property_id, r.room_type, r.rate_plan, c.night, c.family`, channel, from.Time(), to.Time())
	if err := s.scanCellStates(rows, channel, fn); err != nil {
		return fmt.Errorf("read cells of %s: %w", channel, err)
	}
	return nil
}

// cellStatesSelect is the select list and joins of CellStates and
// PropertyCellStates, in the order scanCellStates reads.
const cellStatesSelect = `
SELECT r.property_id, r.room_type, r.rate_plan, c.night, c.family::text,
	c.desired_version, c.d_amount::text, c.d_currency, c.d_inventory, c.d_min_los, c.d_max_los,
	c.d_stop_sell, c.d_cta, c.d_ctd,
	c.sent_version,
	c.acked_version, c.a_amount::text, c.a_currency, c.a_inventory, c.a_min_los, c.a_max_los,
	c.a_stop_sell, c.a_cta, c.a_ctd,
	coalesce(f.code, ''), f.confirmed_at
FROM room_rates r
JOIN channels ch ON ch.id = r.channel
JOIN cells c ON c.room_rate = r.id AND c.family = ANY (enum_range(NULL::family))
-- OFFSET 0 keeps the lateral a probe per cell: pulled up, it becomes a join that
-- reads every confirmation.
LEFT JOIN LATERAL (SELECT code, confirmed_at FROM confirmations WHERE id = c.confirmation OFFSET 0) f ON true`

// scanCellStates calls fn with each row of a cellStatesSelect query.
func (s *Store) scanCellStates(rows pgx.Rows, channel string, fn func(CellState) error) error {
	var st CellState
	var night time.Time
	var family string
	var confirmedAt pgtype.Timestamptz
	var d, a scanLine
	dest := []any{&st.Cell.PropertyID, &st.Cell.RoomTypeCode, &st.Cell.RatePlanCode, &night, &family}
	dest = append(dest, d.dest()...)
	dest = append(dest, &st.SentVersion)
	dest = append(dest, a.dest()...)
	dest = append(dest, &st.ConfirmationID, &confirmedAt)
	_, err := pgx.ForEachRow(rows, dest, func() error {
		st.Cell.Channel, st.Cell.StayDate, st.Family = channel, models.DateOf(night), models.Family(family)
		st.ConfirmedAt = confirmedAt.Time
		out := st
		var err error
		if out.Desired, err = d.result(st.Cell); err != nil {
			return err
		}
		if out.Acked, err = a.result(st.Cell); err != nil {
			return err
		}
		return fn(out)
	})
	return err
}

// scanLine scans the version and value columns of one line.
type scanLine struct {
	version int64
	values  valueColumns
}

func (s *scanLine) dest() []any { return append([]any{&s.version}, s.values.dest()...) }

// result is the scanned line of cell c, with pointers of its own.
func (s *scanLine) result(c models.Cell) (models.ARILine, error) {
	v, err := s.values.values()
	return models.ARILine{RoomTypeCode: c.RoomTypeCode, RatePlanCode: c.RatePlanCode, From: c.StayDate, To: c.StayDate,
		Values: v, Version: s.version}, err
}

func intPtr(v pgtype.Int2) *int {
	if !v.Valid {
		return nil
	}
	n := int(v.Int16)
	return &n
}

func boolPtr(v pgtype.Bool) *bool {
	if !v.Valid {
		return nil
	}
	b := v.Bool
	return &b
}

// SentVersion is the newest version admitted to a channel for one cell and family.
type SentVersion struct {
	Cell    models.Cell
	Family  models.Family
	Version int64
}

// SentVersions calls fn with every cell and family of channel whose night is on or
// after from and that was ever sent, sorted by property, family, room type, rate
// plan and night: one (channel, property, family) ordering gate after another. The
// gate rebuild calls it after a Redis loss, before anything is sent. Like
// CellStates it ranges on the primary key per room rate and family.
func (s *Store) SentVersions(ctx context.Context, channel string, from models.Date, fn func(SentVersion) error) error {
	rows, _ := s.pool.Query(ctx, `
SELECT r.property_id, c.family::text, r.room_type, r.rate_plan, c.night, c.sent_version
FROM room_rates r
JOIN channels ch ON ch.id = r.channel
JOIN cells c ON c.room_rate = r.id AND c.family = ANY (enum_range(NULL::family))
WHERE ch.slug = $1 AND c.night >= $2 AND c.sent_version > 0
ORDER BY r.property_id, c.family, r.room_type, r.rate_plan, c.night`, channel, from.Time())
	var sv SentVersion
	var family string
	var night time.Time
	sv.Cell.Channel = channel
	_, err := pgx.ForEachRow(rows, []any{&sv.Cell.PropertyID, &family, &sv.Cell.RoomTypeCode,
		&sv.Cell.RatePlanCode, &night, &sv.Version}, func() error {
		sv.Family, sv.Cell.StayDate = models.Family(family), models.DateOf(night)
		return fn(sv)
	})
	if err != nil {
		return fmt.Errorf("read sent versions of %s: %w", channel, err)
	}
	return nil
}
