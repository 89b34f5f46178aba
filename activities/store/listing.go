package store

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// Batch states the store records; StateUnknown is a batch from before the store
// recorded states, or one Temporal did not know (EndedUnseen with no state).
const (
	StateRunning = "running"
	StateUnknown = "unknown"
)

// RegisterBatch makes sure batchID has its row, so that a listing shows it from
// its start on (PrepareBatch would create it a moment later).
func (s *Store) RegisterBatch(ctx context.Context, batchID string) error {
	_, err := s.batchRef(ctx, batchID)
	return err
}

// CallbackEvent is a completion callback to deliver once the batch has ended: Body
// is the exact JSON every attempt sends.
type CallbackEvent struct {
	EventID string
	Tenant  string
	URL     string
	Body    []byte
}

// FinishBatch records how batchID ended (done, cancelled, terminated, …) and, with
// cb, puts its callback in the outbox, in one transaction. A retried call keeps the
// first event: the same event id is never queued twice.
func (s *Store) FinishBatch(ctx context.Context, batchID, state string, cb *CallbackEvent) error {
	batch, err := s.batchRef(ctx, batchID)
	if err != nil {
		return err
	}
	now := s.now()
	err = s.inTx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `UPDATE batches SET state = $2, ended_at = coalesce(ended_at, $3) WHERE id = $1`,
			batch, state, now); err != nil {
			return err
		}
		if cb == nil {
			return nil
		}
		_, err := tx.Exec(ctx, `
INSERT INTO callbacks (event_id, batch, tenant, url, body, created_at, next_at) VALUES ($1, $2, $3, $4, $5, $6, $6)
ON CONFLICT (event_id) DO NOTHING`, cb.EventID, batch, cb.Tenant, cb.URL, string(cb.Body), now)
		return err
	})
	if err != nil {
		return fmt.Errorf("finish batch %s: %w", batchID, err)
	}
	return nil
}

// RunningBatch is a batch the store records as running, as ClaimRunning hands it
// to the sweeper.
type RunningBatch struct {
	BatchID   string
	CreatedAt time.Time
}

// ClaimRunning takes up to n batches recorded running whose last look (their
// creation, before the first) is at least every old, marks them looked at now and
// returns them, oldest look first: each running batch is handed out about once per
// every, whichever sweepers run. O(n) on batches_running, which holds only the
// running batches.
func (s *Store) ClaimRunning(ctx context.Context, n int, every time.Duration) ([]RunningBatch, error) {
	now := s.now()
	rows, _ := s.pool.Query(ctx, `
UPDATE batches b SET checked_at = $2
FROM (SELECT id FROM batches WHERE state = 'running' AND coalesce(checked_at, created_at) <= $1
	ORDER BY coalesce(checked_at, created_at) LIMIT $3 FOR UPDATE SKIP LOCKED) due
WHERE b.id = due.id
RETURNING b.batch_id, b.created_at`, now.Add(-every), now, n)
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[RunningBatch])
	if err != nil {
		return nil, fmt.Errorf("claim running batches: %w", err)
	}
	return out, nil
}

// EndedUnseen records how a batch recorded running ended when nothing recorded it
// (no FinishBatch ran: terminated, failed, timed out, or a history from before
// FinishBatch); "" is unknown (Temporal does not know the batch). A batch whose end
// is recorded keeps it.
func (s *Store) EndedUnseen(ctx context.Context, batchID, state string) error {
	if _, err := s.pool.Exec(ctx, `UPDATE batches SET state = $2, ended_at = coalesce(ended_at, $3)
WHERE batch_id = $1 AND state = 'running'`, batchID, pgtype.Text{String: state, Valid: state != ""}, s.now()); err != nil {
		return fmt.Errorf("record the end of %s: %w", batchID, err)
	}
	return nil
}

// BatchFilter selects batches for a listing; zero fields select everything.
type BatchFilter struct {
	// Tenant limits the listing to one tenant's batches; AllTenants lists every
	// batch (an operator), and neither lists none.
	Tenant     string
	AllTenants bool
	State      string
	Since      time.Time
	Channel    string
	// Cursor continues a listing where the page that gave it ended.
	Cursor string
	// Limit caps the page (100 when 0).
	Limit int
}

// BatchSummary is one batch of a listing.
type BatchSummary struct {
	BatchID   string    `json:"batch_id"`
	Tenant    string    `json:"tenant,omitempty"`
	State     string    `json:"state"`
	CreatedAt time.Time `json:"created_at"`
	EndedAt   time.Time `json:"ended_at,omitzero"`
	// PlannedUpdates is nil until PrepareBatch recorded the batch's updates.
	PlannedUpdates *int     `json:"planned_updates,omitempty"`
	Channels       []string `json:"channels"`
}

// ErrBadCursor is a cursor no listing gave.
var ErrBadCursor = errors.New("not a cursor this listing gave")

// ListBatches is a page of batches matching f, newest first, and the cursor of the
// next page ("" after the last). It ranges on batches_listing (or
// batches_tenant_listing): O(limit) rows read past the cursor when the filters
// match most batches; a channel or state few batches have reads more.
func (s *Store) ListBatches(ctx context.Context, f BatchFilter) ([]BatchSummary, string, error) {
	if !f.AllTenants && f.Tenant == "" {
		return []BatchSummary{}, "", nil
	}
	limit := f.Limit
	if limit <= 0 {
		limit = 100
	}
	var where []string
	var args []any
	add := func(cond string, v ...any) {
		for _, x := range v {
			args = append(args, x)
			cond = strings.Replace(cond, "$?", "$"+strconv.Itoa(len(args)), 1)
		}
		where = append(where, cond)
	}
	if !f.AllTenants {
		add("b.tenant = $?", f.Tenant)
	}
	switch f.State {
	case "":
	case StateUnknown:
		add("b.state IS NULL")
	default:
		add("b.state = $?", f.State)
	}
	if !f.Since.IsZero() {
		add("b.created_at >= $?", f.Since)
	}
	if f.Channel != "" {
		add(`EXISTS (SELECT 1 FROM batch_expected e JOIN channels ch ON ch.id = e.channel
	WHERE e.batch = b.id AND ch.slug = $?)`, f.Channel)
	}
	if f.Cursor != "" {
		at, id, err := parseCursor(f.Cursor)
		if err != nil {
			return nil, "", err
		}
		add("(b.created_at, b.id) < ($?, $?)", at, id)
	}
	q := `SELECT b.id, b.batch_id, coalesce(b.tenant, ''), coalesce(b.state, '` + StateUnknown + `'), b.created_at, b.ended_at,
	b.planned_updates,
	coalesce((SELECT array_agg(ch.slug ORDER BY ch.slug) FROM batch_expected e JOIN channels ch ON ch.id = e.channel
		WHERE e.batch = b.id), '{}')
FROM batches b`
	if len(where) > 0 {
		q += "\nWHERE " + strings.Join(where, " AND ")
	}
	args = append(args, limit+1)
	q += fmt.Sprintf("\nORDER BY b.created_at DESC, b.id DESC LIMIT $%d", len(args))
	rows, _ := s.pool.Query(ctx, q, args...)
	type row struct {
		id int64
		BatchSummary
	}
	list, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (row, error) {
		var out row
		var ended pgtype.Timestamptz
		var planned pgtype.Int4
		err := r.Scan(&out.id, &out.BatchID, &out.Tenant, &out.State, &out.CreatedAt, &ended, &planned, &out.Channels)
		out.EndedAt = ended.Time
		if planned.Valid {
			n := int(planned.Int32)
			out.PlannedUpdates = &n
		}
		return out, err
	})
	if err != nil {
		return nil, "", fmt.Errorf("list batches: %w", err)
	}
	next := ""
	if len(list) > limit {
		list = list[:limit]
		last := list[limit-1]
		next = cursorOf(last.CreatedAt, last.id)
	}
	out := make([]BatchSummary, len(list))
	for i, r := range list {
		out[i] = r.BatchSummary
	}
	return out, next, nil
}

// cursorOf is the opaque cursor after a row: its creation time (microseconds, as
// PostgreSQL keeps it) and id.
func cursorOf(at time.Time, id int64) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(at.UnixMicro(), 10) + "." + strconv.FormatInt(id, 10)))
}

func parseCursor(c string) (time.Time, int64, error) {
	raw, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return time.Time{}, 0, ErrBadCursor
	}
	us, id, ok := strings.Cut(string(raw), ".")
	micros, err1 := strconv.ParseInt(us, 10, 64)
	n, err2 := strconv.ParseInt(id, 10, 64)
	if !ok || err1 != nil || err2 != nil {
		return time.Time{}, 0, ErrBadCursor
	}
	return time.UnixMicro(micros), n, nil
}

// Callback is a claimed outbox event to deliver.
type Callback struct {
	EventID  string
	Tenant   string
	URL      string
	Body     []byte
	Attempts int
}

// ClaimCallbacks takes up to n due events and holds them for lease, so that no
// other delivery loop sends them meanwhile (a loop that dies lets them come due
// again after the lease: at least once). O(n) on callbacks_due.
func (s *Store) ClaimCallbacks(ctx context.Context, n int, lease time.Duration) ([]Callback, error) {
	now := s.now()
	rows, _ := s.pool.Query(ctx, `
UPDATE callbacks c SET next_at = $2
FROM (SELECT event_id FROM callbacks WHERE delivered_at IS NULL AND failed_at IS NULL AND next_at <= $1
	ORDER BY next_at LIMIT $3 FOR UPDATE SKIP LOCKED) due
WHERE c.event_id = due.event_id
RETURNING c.event_id, c.tenant, c.url, c.body, c.attempts`, now, now.Add(lease), n)
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Callback, error) {
		var c Callback
		var body string
		err := r.Scan(&c.EventID, &c.Tenant, &c.URL, &body, &c.Attempts)
		c.Body = []byte(body)
		return c, err
	})
	if err != nil {
		return nil, fmt.Errorf("claim callbacks: %w", err)
	}
	return out, nil
}

// CallbackAttempted records one delivery attempt of eventID: delivered, or failed
// with why and when to try again (a zero retryAt gives the event up).
func (s *Store) CallbackAttempted(ctx context.Context, eventID string, delivered bool, why string, retryAt time.Time) error {
	var err error
	now := s.now()
	switch {
	case delivered:
		_, err = s.pool.Exec(ctx, `UPDATE callbacks SET attempts = attempts + 1, delivered_at = $2, last_error = NULL
WHERE event_id = $1`, eventID, now)
	case retryAt.IsZero():
		_, err = s.pool.Exec(ctx, `UPDATE callbacks SET attempts = attempts + 1, failed_at = $2, last_error = $3
WHERE event_id = $1`, eventID, now, why)
	default:
		_, err = s.pool.Exec(ctx, `UPDATE callbacks SET attempts = attempts + 1, next_at = $2, last_error = $3
WHERE event_id = $1`, eventID, retryAt, why)
	}
	if err != nil {
		return fmt.Errorf("record callback %s: %w", eventID, err)
	}
	return nil
}

// CallbackState is an outbox event as stored, for tests and operators.
type CallbackState struct {
	EventID   string
	Attempts  int
	Delivered bool
	Failed    bool
	LastError string
}

// CallbackOf reads the outbox event of batchID; ok is false when it has none.
func (s *Store) CallbackOf(ctx context.Context, batchID string) (c CallbackState, ok bool, err error) {
	var last pgtype.Text
	err = s.pool.QueryRow(ctx, `
SELECT c.event_id, c.attempts, c.delivered_at IS NOT NULL, c.failed_at IS NOT NULL, c.last_error
FROM callbacks c JOIN batches b ON b.id = c.batch WHERE b.batch_id = $1`, batchID).
		Scan(&c.EventID, &c.Attempts, &c.Delivered, &c.Failed, &last)
	if errors.Is(err, pgx.ErrNoRows) {
		return c, false, nil
	}
	c.LastError = last.String
	if err != nil {
		return c, false, fmt.Errorf("callback of %s: %w", batchID, err)
	}
	return c, true, nil
}
