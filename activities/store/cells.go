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
