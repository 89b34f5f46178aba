package store

import (
	"bytes"
	"compress/flate"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"

	"github.com/paritysync/paritysync/models"
)

// deflate is the compressed JSON of v: batch payloads and requests repeat their field
// names and codes on every element, and shrink about tenfold.
func deflate(v any) ([]byte, error) {
	var buf bytes.Buffer
	w, ok := deflaters.Get().(*flate.Writer)
	if !ok {
		var err error
		if w, err = flate.NewWriter(&buf, flate.BestSpeed); err != nil {
			return nil, err
		}
	} else {
		w.Reset(&buf)
	}
	defer deflaters.Put(w)
	if err := json.NewEncoder(w).Encode(v); err != nil {
		return nil, err
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// deflaters keeps flate writers for deflate: a new one allocates about 1 MB (its
// window, hash chains and tables) and clears it, and a batch's chunks deflate every
// request on its own, so the allocation cost more than the compression.
var deflaters sync.Pool

// inflaters keeps flate readers for inflate: a new one allocates about 40 KB (its
// window and tables), and every push inflates the lane's next request.
var inflaters sync.Pool

// inflate decodes what deflate wrote into v.
func inflate(b []byte, v any) error {
	br := bytes.NewReader(b)
	r, ok := inflaters.Get().(io.ReadCloser)
	if !ok {
		r = flate.NewReader(br)
	} else if err := r.(flate.Resetter).Reset(br, nil); err != nil {
		return err
	}
	defer func() {
		_ = r.Close()
		inflaters.Put(r)
	}()
	if err := json.NewDecoder(r).Decode(v); err != nil {
		return err
	}
	_, err := io.Copy(io.Discard, r)
	return err
}

// SaveBatch stores a big batch's mutations (the claim check) and returns the key
// BatchSyncInput.PayloadKey carries; the starter, the intake and reconciliation call
// it before starting BatchSync. Saving the same batch again replaces its payload.
func (s *Store) SaveBatch(ctx context.Context, batchID string, ms []models.Mutation) (string, error) {
	body, err := deflate(ms)
	if err != nil {
		return "", fmt.Errorf("encode batch %s: %w", batchID, err)
	}
	if _, err := s.pool.Exec(ctx, `
INSERT INTO batches (batch_id, mutations, payload, created_at) VALUES ($1, $2, $3, $4)
ON CONFLICT (batch_id) DO UPDATE SET mutations = excluded.mutations, payload = excluded.payload`,
		batchID, len(ms), body, s.now()); err != nil {
		return "", fmt.Errorf("save batch %s: %w", batchID, err)
	}
	return models.BatchWorkflowID(batchID), nil
}

// LoadBatch reads the mutations SaveBatch stored under key (or SaveBatchPart and
// SealBatch, the parts after the payload); PrepareBatch calls it.
// It fails with ErrBatchNotFound once the batch was released.
func (s *Store) LoadBatch(ctx context.Context, key string) ([]models.Mutation, error) {
	batchID, ok := strings.CutPrefix(key, models.BatchWorkflowID(""))
	if !ok {
		return nil, fmt.Errorf("load batch %s: not a batch key: %w", key, ErrBatchNotFound)
	}
	var body []byte
	err := s.pool.QueryRow(ctx, `SELECT payload FROM batches WHERE batch_id = $1`, batchID).Scan(&body)
	if errors.Is(err, pgx.ErrNoRows) || (err == nil && body == nil) {
		return nil, fmt.Errorf("load batch %s: %w", key, ErrBatchNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("load batch %s: %w", key, err)
	}
	var ms []models.Mutation
	if err := inflate(body, &ms); err != nil {
		return nil, fmt.Errorf("decode batch %s: %w", key, err)
	}
	if ms, err = s.loadParts(ctx, batchID, ms); err != nil {
		return nil, fmt.Errorf("decode batch %s: %w", key, err)
	}
	return ms, nil
}

// SaveChunk stores the requests of one chunk and returns its key, the chunk's
// ChannelSync workflow id; PrepareBatch calls it per chunk. Saving the same chunk
// again (a retried PrepareBatch) replaces it.
func (s *Store) SaveChunk(ctx context.Context, batchID string, c models.Chunk, reqs []models.ChannelRequest) (string, error) {
	key := models.ChannelSyncWorkflowID(batchID, c.Channel, c.Priority, c.N)
	bodies := make([][]byte, len(reqs))
	idx := make([]int32, len(reqs))
	for i, r := range reqs {
		b, err := deflate(r)
		if err != nil {
			return "", fmt.Errorf("encode chunk %s: %w", key, err)
		}
		bodies[i], idx[i] = b, int32(i)
	}
	batch, ch, err := s.batchChannel(ctx, batchID, c.Channel)
	if err != nil {
		return "", err
	}
	err = s.inTx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `DELETE FROM batch_requests WHERE batch = $1 AND channel = $2 AND priority = $3 AND chunk = $4`,
			batch, ch, c.Priority, c.N); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `
INSERT INTO batch_requests (batch, channel, priority, chunk, idx, body)
SELECT $1, $2, $3, $4, * FROM unnest($5::integer[], $6::bytea[])`, batch, ch, c.Priority, c.N, idx, bodies)
		return err
	})
	if err != nil {
		return "", fmt.Errorf("save chunk %s: %w", key, err)
	}
	return key, nil
}

// chunkRef is a chunk key taken apart.
type chunkRef struct {
	batchID  string
	channel  string
	priority int
	n        int
}

// parseChunkKey reads a key SaveChunk returned: batch/<batch>/<channel>/p<prio>/<n>,
// where only the batch id may contain slashes.
func parseChunkKey(key string) (chunkRef, error) {
	rest, ok := strings.CutPrefix(key, models.BatchWorkflowID(""))
	parts := strings.Split(rest, "/")
	if !ok || len(parts) < 4 || !strings.HasPrefix(parts[len(parts)-2], "p") {
		return chunkRef{}, fmt.Errorf("not a chunk key: %q", key)
	}
	k := len(parts)
	prio, err1 := strconv.Atoi(parts[k-2][1:])
	n, err2 := strconv.Atoi(parts[k-1])
	if err1 != nil || err2 != nil {
		return chunkRef{}, fmt.Errorf("not a chunk key: %q", key)
	}
	return chunkRef{batchID: strings.Join(parts[:k-3], "/"), channel: parts[k-3], priority: prio, n: n}, nil
}

// Request reads request i of a stored chunk; PushRequest and the dead-letter activity
// call it. It fails with ErrBatchNotFound past the chunk's end and once the batch
// was released.
func (s *Store) Request(ctx context.Context, chunkKey string, i int) (models.ChannelRequest, error) {
	var r models.ChannelRequest
	ref, err := parseChunkKey(chunkKey)
	if err != nil {
		return r, fmt.Errorf("request %d of %s: %w", i, chunkKey, errors.Join(err, ErrBatchNotFound))
	}
	var body []byte
	err = s.pool.QueryRow(ctx, `
SELECT q.body FROM batch_requests q
JOIN batches b ON b.id = q.batch JOIN channels ch ON ch.id = q.channel
WHERE b.batch_id = $1 AND ch.slug = $2 AND q.priority = $3 AND q.chunk = $4 AND q.idx = $5`,
		ref.batchID, ref.channel, ref.priority, ref.n, i).Scan(&body)
	if errors.Is(err, pgx.ErrNoRows) {
		return r, fmt.Errorf("request %d of %s: %w", i, chunkKey, ErrBatchNotFound)
	}
	if err != nil {
		return r, fmt.Errorf("request %d of %s: %w", i, chunkKey, err)
	}
	if err := inflate(body, &r); err != nil {
		return r, fmt.Errorf("decode request %d of %s: %w", i, chunkKey, err)
	}
	return r, nil
}

// Requests reads requests idx of a stored chunk in one statement; the
// requests that do not exist (past the chunk's end, or released) are missing from
// the answer. ReserveSlots reads the first request of every lane with it.
func (s *Store) Requests(ctx context.Context, chunkKey string, idx ...int) (map[int]models.ChannelRequest, error) {
	ref, err := parseChunkKey(chunkKey)
	if err != nil {
		return nil, fmt.Errorf("requests of %s: %w", chunkKey, errors.Join(err, ErrBatchNotFound))
	}
	got, err := readRequests(ctx, s.pool, ref, idx)
	if err != nil {
		return nil, fmt.Errorf("requests of %s: %w", chunkKey, err)
	}
	return got, nil
}

// readRequests reads requests idx of chunk ref on q, by primary key.
func readRequests(ctx context.Context, q dbtx, ref chunkRef, idx []int) (map[int]models.ChannelRequest, error) {
	rows, _ := q.Query(ctx, requestsSQL(1), requestsArgs(ref, idx)...)
	return scanRequests(rows, len(idx))
}

// requestsSQL selects the stored requests of a chunk, its parameters numbered from
// $first: requestsArgs.
func requestsSQL(first int) string {
	return fmt.Sprintf(`
SELECT q.idx, q.body FROM batch_requests q
JOIN batches b ON b.id = q.batch JOIN channels ch ON ch.id = q.channel
WHERE b.batch_id = $%d AND ch.slug = $%d AND q.priority = $%d AND q.chunk = $%d AND q.idx = ANY($%d)`,
		first, first+1, first+2, first+3, first+4)
}

// requestsArgs are requestsSQL's parameters for requests idx of chunk ref.
func requestsArgs(ref chunkRef, idx []int) []any {
	is := make([]int32, len(idx))
	for k, i := range idx {
		is[k] = int32(i)
	}
	return []any{ref.batchID, ref.channel, ref.priority, ref.n, is}
}

// scanRequests decodes the requests a requestsSQL query returns, by index.
func scanRequests(rows pgx.Rows, n int) (map[int]models.ChannelRequest, error) {
	out := make(map[int]models.ChannelRequest, n)
	var i int32
	var body []byte
	if _, err := pgx.ForEachRow(rows, []any{&i, &body}, func() error {
		var r models.ChannelRequest
		if err := inflate(body, &r); err != nil {
			return fmt.Errorf("decode request %d: %w", i, err)
		}
		out[int(i)] = r
		return nil
	}); err != nil {
		return nil, err
	}
	return out, nil
}

// ReleaseBatch drops a finished batch's payload and stored requests; BatchSync calls
// it once every update has an outcome. The batch's outcomes stay.
func (s *Store) ReleaseBatch(ctx context.Context, batchID string) error {
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `
DELETE FROM batch_requests WHERE batch = (SELECT id FROM batches WHERE batch_id = $1)`, batchID); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `
DELETE FROM batch_parts WHERE batch = (SELECT id FROM batches WHERE batch_id = $1)`, batchID); err != nil {
			return err
		}
		// released_at takes the batch out of the parity lag's open batches, inline
		// batches (no payload) too.
		_, err := tx.Exec(ctx, `UPDATE batches SET payload = NULL, released_at = coalesce(released_at, $2)
WHERE batch_id = $1 AND (payload IS NOT NULL OR released_at IS NULL)`, batchID, s.now())
		return err
	})
	if err != nil {
		return fmt.Errorf("release batch %s: %w", batchID, err)
	}
	return nil
}
