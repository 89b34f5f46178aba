package store

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/paritysync/paritysync/models"
)

// DeadLetter is a request (or the lines of it that failed) that could not be
// delivered, with why.
type DeadLetter struct {
	ID         int64                 `json:"id"`
	BatchID    string                `json:"batch_id"`
	Channel    string                `json:"channel"`
	PropertyID string                `json:"property_id"`
	Family     models.Family         `json:"family"`
	Reason     string                `json:"reason"`
	Status     int                   `json:"status,omitempty"`
	Message    string                `json:"message,omitempty"`
	Request    models.ChannelRequest `json:"request"`
	// MutationIDs and StayDates are taken from the request when parked, so that an
	// operator can find a mutation's or a night's dead letters.
	MutationIDs []string      `json:"mutation_ids"`
	StayDates   []models.Date `json:"stay_dates"`
	ParkedAt    time.Time     `json:"parked_at"`
	// AckedAt is set once an operator acknowledged (or replayed) the entry.
	AckedAt time.Time `json:"acked_at,omitzero"`
	AckNote string    `json:"ack_note,omitempty"`
}

// Mutations are the mutations that re-send the dead letter's request at the
// versions it carried, one per ref, with the mutation ids it carried (a night of a
// range mutation as "<id>~<night>"): a replay. The desired state drops any that a
// newer version overtook since.
func (d DeadLetter) Mutations() []models.Mutation {
	r := d.Request
	out := make([]models.Mutation, 0, len(r.Refs))
	for _, ref := range r.Refs {
		if ref.Line < 0 || ref.Line >= len(r.Lines) {
			continue
		}
		l := r.Lines[ref.Line]
		c := models.Cell{Channel: r.Channel, PropertyID: r.PropertyID, RoomTypeCode: l.RoomTypeCode,
			RatePlanCode: l.RatePlanCode, StayDate: ref.StayDate}
		l.Version = ref.Version
		m := models.MutationOf(c, r.Family, l)
		m.ID, m.CorrelationID, m.Priority = ref.ID, ref.CorrelationID, r.Priority
		if ref.Nights > 0 {
			// A night of a range mutation goes again on its own: under the range's id
			// and its night, so that each replayed night has its own outcome.
			m.ID = ref.ID + "~" + ref.StayDate.String()
		}
		out = append(out, m)
	}
	return out
}

// ParkDeadLetter parks d (ID, ParkedAt, MutationIDs and StayDates are filled from
// the request) and records the dead-lettered outcome of each of its refs, in one
// transaction; the dead-letter activity calls it. The same request content parked
// again in the same batch (a retried activity) is parked once: parked is false and
// id is the first entry's.
func (s *Store) ParkDeadLetter(ctx context.Context, d DeadLetter) (id int64, parked bool, err error) {
	r := d.Request
	d.Channel, d.PropertyID, d.Family = r.Channel, r.PropertyID, r.Family
	var nights []time.Time
	ids := make([]string, 0, len(r.Refs))
	for _, ref := range r.Refs {
		if !slices.Contains(ids, ref.ID) {
			ids = append(ids, ref.ID)
		}
		if t := ref.StayDate.Time(); !slices.ContainsFunc(nights, t.Equal) {
			nights = append(nights, t)
		}
	}
	slices.SortFunc(nights, time.Time.Compare)
	key, err := hex.DecodeString(r.IdempotencyKey())
	if err != nil {
		return 0, false, fmt.Errorf("park dead letter: %w", err)
	}
	fail := func(err error) (int64, bool, error) {
		return 0, false, fmt.Errorf("park dead letter on %s: %w", d.Channel, err)
	}
	batch, ch, err := s.batchChannel(ctx, d.BatchID, d.Channel)
	if err != nil {
		return fail(err)
	}
	err = s.inTx(ctx, func(tx pgx.Tx) error {
		err := tx.QueryRow(ctx, `
INSERT INTO dead_letters (batch_id, channel, property_id, family, reason, status, message, request,
	request_key, mutation_ids, stay_dates, parked_at)
VALUES ($1, $2, $3, $4::text::family, $5, $6, $7, $8, $9, $10, $11, $12)
ON CONFLICT (batch_id, request_key) DO NOTHING
RETURNING id`, d.BatchID, ch, d.PropertyID, string(d.Family), d.Reason,
			pgtype.Int2{Int16: int16(d.Status), Valid: d.Status != 0},
			pgtype.Text{String: d.Message, Valid: d.Message != ""}, r, key, ids, nights, s.now()).Scan(&id)
		if errors.Is(err, pgx.ErrNoRows) {
			return tx.QueryRow(ctx, `SELECT id FROM dead_letters WHERE batch_id = $1 AND request_key = $2`,
				d.BatchID, key).Scan(&id)
		}
		if err != nil {
			return err
		}
		parked = true
		outs := make([]outcomeRow, len(r.Refs))
		for i, ref := range r.Refs {
			outs[i] = outcomeRow{mutationID: ref.ID, family: r.Family, channel: ch,
				outcome: models.OutcomeDeadLettered, reason: d.Reason, night: ref.StayDate, nights: ref.Nights}
		}
		_, err = insertOutcomes(ctx, tx, batch, outs)
		return err
	})
	if err != nil {
		return fail(err)
	}
	return id, parked, nil
}

// DeadLetterFilter selects dead letters; zero fields select everything.
type DeadLetterFilter struct {
	Channel string
	Reason  string
	BatchID string
	// Acked includes entries an operator already acknowledged.
	Acked bool
	// AfterID pages: only entries with a larger id.
	AfterID int64
	// Limit caps the answer (100 when 0).
	Limit int
}

// deadLetterColumns are the columns scanDeadLetter reads.
const deadLetterColumns = `d.id, d.batch_id, ch.slug, d.property_id, d.family::text, d.reason,
	coalesce(d.status, 0), coalesce(d.message, ''), d.request, d.mutation_ids, d.stay_dates, d.parked_at,
	d.acked_at, coalesce(d.ack_note, '')`

// scanDeadLetter reads one row of deadLetterColumns.
func scanDeadLetter(row pgx.CollectableRow) (DeadLetter, error) {
	var d DeadLetter
	var family string
	var status int16
	var nights []time.Time
	var acked pgtype.Timestamptz
	err := row.Scan(&d.ID, &d.BatchID, &d.Channel, &d.PropertyID, &family, &d.Reason, &status, &d.Message,
		&d.Request, &d.MutationIDs, &nights, &d.ParkedAt, &acked, &d.AckNote)
	d.Family, d.Status, d.AckedAt = models.Family(family), int(status), acked.Time
	for _, n := range nights {
		d.StayDates = append(d.StayDates, models.DateOf(n))
	}
	return d, err
}

// DeadLetters lists dead letters matching f, oldest first; the operator CLI calls it.
func (s *Store) DeadLetters(ctx context.Context, f DeadLetterFilter) ([]DeadLetter, error) {
	where := []string{"d.id > $1"}
	args := []any{f.AfterID}
	add := func(cond string, v any) {
		args = append(args, v)
		where = append(where, fmt.Sprintf(cond, len(args)))
	}
	if f.Channel != "" {
		add("ch.slug = $%d", f.Channel)
	}
	if f.Reason != "" {
		add("d.reason = $%d", f.Reason)
	}
	if f.BatchID != "" {
		add("d.batch_id = $%d", f.BatchID)
	}
	if !f.Acked {
		where = append(where, "d.acked_at IS NULL")
	}
	limit := f.Limit
	if limit <= 0 {
		limit = 100
	}
	args = append(args, limit)
	rows, _ := s.pool.Query(ctx, `SELECT `+deadLetterColumns+`
FROM dead_letters d JOIN channels ch ON ch.id = d.channel
WHERE `+strings.Join(where, " AND ")+fmt.Sprintf(" ORDER BY d.id LIMIT $%d", len(args)), args...)
	out, err := pgx.CollectRows(rows, scanDeadLetter)
	if err != nil {
		return nil, fmt.Errorf("list dead letters: %w", err)
	}
	return out, nil
}

// DeadLetter reads one dead letter, with its request, for a replay.
func (s *Store) DeadLetter(ctx context.Context, id int64) (DeadLetter, error) {
	rows, _ := s.pool.Query(ctx, `SELECT `+deadLetterColumns+`
FROM dead_letters d JOIN channels ch ON ch.id = d.channel WHERE d.id = $1`, id)
	d, err := pgx.CollectExactlyOneRow(rows, scanDeadLetter)
	if errors.Is(err, pgx.ErrNoRows) {
		return d, fmt.Errorf("dead letter %d: %w", id, ErrDeadLetterNotFound)
	}
	if err != nil {
		return d, fmt.Errorf("dead letter %d: %w", id, err)
	}
	return d, nil
}

// AckDeadLetters marks dead letters as dealt with (note says how, e.g. "replayed as
// batch X"); acknowledged entries leave the default listing and are pruned after
// their retention. It returns how many were not acknowledged before.
func (s *Store) AckDeadLetters(ctx context.Context, ids []int64, note string) (int, error) {
	tag, err := s.pool.Exec(ctx, `
UPDATE dead_letters SET acked_at = $2, ack_note = nullif($3, '') WHERE id = ANY($1) AND acked_at IS NULL`,
		ids, s.now(), note)
	if err != nil {
		return 0, fmt.Errorf("ack dead letters: %w", err)
	}
	return int(tag.RowsAffected()), nil
}

// DeadLettered counts the updates of r whose outcome in batchID is dead-lettered:
// what parking r dead-lettered, for a request some of whose updates had an outcome
// already (a failed child's chunk, parked whole after some of it was committed).
func (s *Store) DeadLettered(ctx context.Context, batchID string, r models.ChannelRequest) (int, error) {
	batch, err := s.batchRef(ctx, batchID)
	if err != nil {
		return 0, fmt.Errorf("count dead letters of %s: %w", batchID, err)
	}
	ids := make([]string, 0, len(r.Refs))
	for _, ref := range r.Refs {
		if !slices.Contains(ids, ref.ID) {
			ids = append(ids, ref.ID)
		}
	}
	var n int
	if err := s.pool.QueryRow(ctx, `
SELECT count(*)::integer FROM outcomes
WHERE batch = $1 AND mutation_id = ANY($2) AND family = $3::text::family AND outcome = $4::text::outcome`,
		batch, ids, string(r.Family), string(models.OutcomeDeadLettered)).Scan(&n); err != nil {
		return 0, fmt.Errorf("count dead letters of %s: %w", batchID, err)
	}
	return n, nil
}
