package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/paritysync/paritysync/models"
)

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
