package store

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/paritysync/paritysync/config"
	"github.com/paritysync/paritysync/models"
)

// ErrBatchNotFound means a batch's stored payload or request was released or never
// existed. Retrying cannot help; the caller parks the affected updates.
var ErrBatchNotFound = errors.New("stored batch not found")

// ErrDeadLetterNotFound means no dead letter has the asked id.
var ErrDeadLetterNotFound = errors.New("dead letter not found")

// rowsPerStatement bounds one statement's array parameters, so a 100k-mutation batch
// is written in short transactions that hold few row locks at a time.
const rowsPerStatement = 5000

// Store is paritysync's system of record in PostgreSQL: desired, sent and
// acknowledged state per cell, per-mutation outcomes, dead letters and the payloads
// of running batches. Its methods are safe for concurrent use and idempotent, so a
// retried activity never records anything twice.
type Store struct {
	pool *pgxpool.Pool
	now  func() time.Time

	// poolSize, when positive, is how many connections Open gives the pool unless
	// the URL says (WithPoolSize).
	poolSize int

	mu        sync.Mutex
	channels  map[string]int16    // slug → id; ids never change once given
	batches   map[string]batchRow // batch id → its row; bounded, see batchRef
	roomRates map[roomRate]int32  // room rate → id; ids never change once given; bounded
}

// dbtx is what a statement runs on: the pool, or a transaction it is part of.
type dbtx interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// Option configures a Store.
type Option func(*Store)

// WithClock sets the clock for parked_at and confirmed_at timestamps.
func WithClock(now func() time.Time) Option { return func(s *Store) { s.now = now } }

// WithPoolSize makes Open size the pool for n callers at once, one connection
// each, unless the URL sets pool_max_conns. pgx's own default, max(4, CPUs), is
// far below the worker's activity slots: at 32 pushes in flight on 2 CPUs, 9 in
// 10 of their transactions waited for one of the 4 connections, 120 ms on average.
func WithPoolSize(n int) Option { return func(s *Store) { s.poolSize = n } }

// New returns a store over pool. The caller owns the pool.
func New(pool *pgxpool.Pool, opts ...Option) *Store {
	s := &Store{pool: pool, now: time.Now, channels: map[string]int16{}, batches: map[string]batchRow{},
		roomRates: map[roomRate]int32{}}
	for _, o := range opts {
		o(s)
	}
	return s
}

// Open connects to the database at url (config.Settings.DatabaseURL, from
// PARITYSYNC_DATABASE_URL) and returns a store that owns the pool; Close releases it.
// A search_path query parameter selects the schema; pool_max_conns bounds the pool
// (else WithPoolSize, else pgx's default).
func Open(ctx context.Context, url string, opts ...Option) (*Store, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("parse database url %s: %w", config.MaskURL(url), config.MaskError(err, url))
	}
	var o Store
	for _, opt := range opts {
		opt(&o)
	}
	if o.poolSize > 0 && !strings.Contains(url, "pool_max_conns") {
		cfg.MaxConns = int32(min(o.poolSize, math.MaxInt32))
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connect to postgres %s: %w", config.MaskURL(url), config.MaskError(err, url))
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("connect to postgres %s: %w", config.MaskURL(url), config.MaskError(err, url))
	}
	return New(pool, opts...), nil
}

// Close releases the pool.
func (s *Store) Close() { s.pool.Close() }

// Ping checks the database is reachable (a readiness probe).
func (s *Store) Ping(ctx context.Context) error { return s.pool.Ping(ctx) }

// channelIDs returns the id of each slug, numbering new slugs.
func (s *Store) channelIDs(ctx context.Context, slugs ...string) (map[string]int16, error) {
	out := make(map[string]int16, len(slugs))
	var missing []string
	s.mu.Lock()
	for _, slug := range slugs {
		if id, ok := s.channels[slug]; ok {
			out[slug] = id
		} else if !slices.Contains(missing, slug) {
			missing = append(missing, slug)
		}
	}
	s.mu.Unlock()
	if len(missing) == 0 {
		return out, nil
	}
	slices.Sort(missing)
	// NOT EXISTS first: ON CONFLICT alone would draw an id for every known slug.
	if _, err := s.pool.Exec(ctx, `
INSERT INTO channels (slug) SELECT k FROM unnest($1::text[]) AS k
WHERE NOT EXISTS (SELECT 1 FROM channels WHERE slug = k)
ON CONFLICT DO NOTHING`, missing); err != nil {
		return nil, fmt.Errorf("number channels: %w", err)
	}
	rows, _ := s.pool.Query(ctx, `SELECT slug, id FROM channels WHERE slug = ANY($1)`, missing)
	if err := collectPairs(rows, out); err != nil {
		return nil, fmt.Errorf("number channels: %w", err)
	}
	s.mu.Lock()
	for _, slug := range missing {
		s.channels[slug] = out[slug]
	}
	s.mu.Unlock()
	return out, nil
}

// channelID is channelIDs for one slug.
func (s *Store) channelID(ctx context.Context, slug string) (int16, error) {
	ids, err := s.channelIDs(ctx, slug)
	if err != nil {
		return 0, err
	}
	return ids[slug], nil
}

// maxCachedBatches bounds the batch id cache; a worker sees few batches at a time.
const maxCachedBatches = 4096

// batchRow is what never changes of a batch's row once it exists: its id and when
// the batch was accepted.
type batchRow struct {
	id      int64
	created time.Time
}

// batchRef returns the row id of batch batchID, creating the row on first use.
func (s *Store) batchRef(ctx context.Context, batchID string) (int64, error) {
	b, err := s.batchRowOf(ctx, batchID)
	return b.id, err
}

// batchRowOf returns the row of batch batchID, creating it on first use; cached,
// so a push reads neither again.
func (s *Store) batchRowOf(ctx context.Context, batchID string) (batchRow, error) {
	s.mu.Lock()
	b, ok := s.batches[batchID]
	s.mu.Unlock()
	if ok {
		return b, nil
	}
	find := func() error {
		return s.pool.QueryRow(ctx, `SELECT id, created_at FROM batches WHERE batch_id = $1`, batchID).Scan(&b.id, &b.created)
	}
	err := find()
	if errors.Is(err, pgx.ErrNoRows) {
		err = s.pool.QueryRow(ctx, `INSERT INTO batches (batch_id, created_at) VALUES ($1, $2)
ON CONFLICT DO NOTHING RETURNING id, created_at`, batchID, s.now()).Scan(&b.id, &b.created)
		if errors.Is(err, pgx.ErrNoRows) {
			err = find() // another worker created it meanwhile
		}
	}
	if err != nil {
		return batchRow{}, fmt.Errorf("batch %s: %w", batchID, err)
	}
	s.mu.Lock()
	if len(s.batches) >= maxCachedBatches {
		clear(s.batches)
	}
	s.batches[batchID] = b
	s.mu.Unlock()
	return b, nil
}

// batchChannel returns the row ids of batch batchID and of channel slug, creating
// either row on first use.
func (s *Store) batchChannel(ctx context.Context, batchID, slug string) (int64, int16, error) {
	b, ch, err := s.batchRowChannel(ctx, batchID, slug)
	return b.id, ch, err
}

// batchRowChannel is batchChannel with the batch's whole row.
func (s *Store) batchRowChannel(ctx context.Context, batchID, slug string) (batchRow, int16, error) {
	batch, err := s.batchRowOf(ctx, batchID)
	if err != nil {
		return batchRow{}, 0, err
	}
	ch, err := s.channelID(ctx, slug)
	return batch, ch, err
}

// roomRate is a cell without its night: the key of table room_rates.
type roomRate struct {
	channel  string
	property string
	room     string
	plan     string
}

// roomRateOf is the room rate of cell c.
func roomRateOf(c models.Cell) roomRate {
	return roomRate{c.Channel, c.PropertyID, c.RoomTypeCode, c.RatePlanCode}
}

// maxCachedRoomRates bounds the room rate cache (about 100 B an entry).
const maxCachedRoomRates = 1 << 16

// roomRateIDs returns the id of each room rate, numbering new ones. Ids never change
// once given, so they are cached: a push resolves its room rates without a statement
// once this worker saw them. The lookup commits on its own, never in a caller's
// transaction, whose rollback would leave the cache an id that does not exist.
func (s *Store) roomRateIDs(ctx context.Context, rrs map[roomRate]int32) error {
	s.mu.Lock()
	missing := 0
	for rr := range rrs {
		if id, ok := s.roomRates[rr]; ok {
			rrs[rr] = id
		} else {
			missing++
		}
	}
	s.mu.Unlock()
	if missing == 0 {
		return nil
	}
	uncached := make(map[roomRate]int32, missing)
	for rr, id := range rrs {
		if id == 0 {
			uncached[rr] = 0
		}
	}
	if err := s.lookupRoomRates(ctx, uncached); err != nil {
		return err
	}
	s.mu.Lock()
	if len(s.roomRates)+len(uncached) > maxCachedRoomRates {
		clear(s.roomRates)
	}
	for rr, id := range uncached {
		rrs[rr] = id
		s.roomRates[rr] = id
	}
	s.mu.Unlock()
	return nil
}

// lookupRoomRates fills the ids of rrs from the table, numbering new ones. A batch
// names few distinct room rates, so this is two short statements per call.
func (s *Store) lookupRoomRates(ctx context.Context, rrs map[roomRate]int32) error {
	slugs := make([]string, 0, 4)
	for rr := range rrs {
		if !slices.Contains(slugs, rr.channel) {
			slugs = append(slugs, rr.channel)
		}
	}
	chIDs, err := s.channelIDs(ctx, slugs...)
	if err != nil {
		return err
	}
	keys := make([]roomRate, 0, len(rrs))
	for rr := range rrs {
		keys = append(keys, rr)
	}
	// A fixed order takes unique-index locks in the same order in every worker.
	slices.SortFunc(keys, func(a, b roomRate) int {
		return cmp.Or(cmp.Compare(a.channel, b.channel), cmp.Compare(a.property, b.property),
			cmp.Compare(a.room, b.room), cmp.Compare(a.plan, b.plan))
	})
	// columns are keys as the arrays unnest takes.
	columns := func(keys []roomRate) []any {
		chs := make([]int16, len(keys))
		props, rooms, plans := make([]string, len(keys)), make([]string, len(keys)), make([]string, len(keys))
		for i, k := range keys {
			chs[i], props[i], rooms[i], plans[i] = chIDs[k.channel], k.property, k.room, k.plan
		}
		return []any{chs, props, rooms, plans}
	}
	find := func(keys []roomRate) ([]roomRate, error) {
		rows, _ := s.pool.Query(ctx, `
SELECT r.id, c.slug, r.property_id, r.room_type, r.rate_plan
FROM unnest($1::smallint[], $2::text[], $3::text[], $4::text[]) AS k(channel, property_id, room_type, rate_plan)
JOIN room_rates r USING (channel, property_id, room_type, rate_plan)
JOIN channels c ON c.id = r.channel`, columns(keys)...)
		var id int32
		var rr roomRate
		if _, err := pgx.ForEachRow(rows, []any{&id, &rr.channel, &rr.property, &rr.room, &rr.plan}, func() error {
			rrs[rr] = id
			return nil
		}); err != nil {
			return nil, err
		}
		var missing []roomRate
		for _, k := range keys {
			if rrs[k] == 0 {
				missing = append(missing, k)
			}
		}
		return missing, nil
	}
	missing, err := find(keys)
	if err != nil || len(missing) == 0 {
		return err
	}
	// Only the missing ones: an INSERT … ON CONFLICT draws an id for every row it
	// tries, and a room rate is looked up on every push.
	if _, err := s.pool.Exec(ctx, `
INSERT INTO room_rates (channel, property_id, room_type, rate_plan)
SELECT * FROM unnest($1::smallint[], $2::text[], $3::text[], $4::text[])
ON CONFLICT DO NOTHING`, columns(missing)...); err != nil {
		return fmt.Errorf("number room rates: %w", err)
	}
	if missing, err = find(missing); err != nil {
		return fmt.Errorf("number room rates: %w", err)
	}
	if len(missing) > 0 {
		return fmt.Errorf("number room rates: %d not found after insert", len(missing))
	}
	return nil
}

// collectPairs adds each row of rows, a key and its value, to out.
func collectPairs[K comparable, V any](rows pgx.Rows, out map[K]V) error {
	var k K
	var v V
	_, err := pgx.ForEachRow(rows, []any{&k, &v}, func() error {
		out[k] = v
		return nil
	})
	return err
}

// inTx runs fn in a transaction, committing when it returns nil.
func (s *Store) inTx(ctx context.Context, fn func(pgx.Tx) error) error {
	return pgx.BeginFunc(ctx, s.pool, fn)
}
