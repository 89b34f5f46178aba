package activities

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/paritysync/paritysync/dial"
	"github.com/paritysync/paritysync/models"
)

// Redis keys, all under the store's prefix (default "paritysync:"):
//
//	batch:{<batch>}:mutations                 claim check of a big batch (string, JSON)  TTL BatchTTL
//	batch:{<batch>}:chunk:<channel>:p<prio>:<n>  stored channel requests (list of JSON) TTL BatchTTL
//	ledger:{<channel>}:<property>:<room>:<rate>:<date>:<family>
//	                                          last committed version, values and
//	                                          confirmation id of a cell (hash)
//	                                          expires LedgerGrace after the stay date
//	dlq:{<channel>}                           dead-letter stream, trimmed to DLQMaxLen
//	dlq:{<channel>}:seen:<digest>             guard against a retried activity parking
//	                                          the same thing twice (string) TTL BatchTTL
//
// The hash tags keep a batch's keys, and a channel's keys, in one Redis Cluster slot.
const (
	BatchTTL    = 7 * 24 * time.Hour
	LedgerGrace = 35 * 24 * time.Hour
	DLQMaxLen   = 100000
)

// DefaultKeyPrefix is the prefix of every key paritysync writes.
const DefaultKeyPrefix = "paritysync:"

// ErrBatchNotFound means a batch's stored payload or chunk expired or never existed.
var ErrBatchNotFound = errors.New("stored batch not found")

// Store is paritysync's Redis state outside the limiter: batch payloads and chunks,
// the ledger and the dead-letter queue.
type Store struct {
	rdb    redis.UniversalClient
	prefix string
}

// NewStore returns a store whose keys start with prefix (DefaultKeyPrefix when empty).
func NewStore(rdb redis.UniversalClient, prefix string) *Store {
	if prefix == "" {
		prefix = DefaultKeyPrefix
	}
	return &Store{rdb: rdb, prefix: prefix}
}

func (s *Store) batchKey(batchID string) string {
	return s.prefix + "batch:{" + batchID + "}:mutations"
}

func (s *Store) chunkKey(batchID, channel string, priority, n int) string {
	return fmt.Sprintf("%sbatch:{%s}:chunk:%s:p%d:%d", s.prefix, batchID, channel, priority, n)
}

func (s *Store) ledgerKey(c models.Cell, f models.Family) string {
	return fmt.Sprintf("%sledger:{%s}:%s:%s:%s:%s:%s", s.prefix, c.Channel, c.PropertyID,
		c.RoomTypeCode, c.RatePlanCode, c.StayDate, f)
}

func (s *Store) dlqKey(channel string) string { return s.prefix + "dlq:{" + channel + "}" }

// SaveBatch stores a batch's mutations for PrepareBatch to load and returns the key.
func (s *Store) SaveBatch(ctx context.Context, batchID string, ms []models.Mutation) (string, error) {
	body, err := json.Marshal(ms)
	if err != nil {
		return "", fmt.Errorf("encode batch %s: %w", batchID, err)
	}
	key := s.batchKey(batchID)
	if err := s.rdb.Set(ctx, key, body, BatchTTL).Err(); err != nil {
		return "", fmt.Errorf("save batch %s: %w", batchID, err)
	}
	return key, nil
}

// LoadBatch reads mutations stored by SaveBatch.
func (s *Store) LoadBatch(ctx context.Context, key string) ([]models.Mutation, error) {
	body, err := s.rdb.Get(ctx, key).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("load batch %s: %w", key, ErrBatchNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("load batch %s: %w", key, err)
	}
	var ms []models.Mutation
	if err := json.Unmarshal(body, &ms); err != nil {
		return nil, fmt.Errorf("decode batch %s: %w", key, err)
	}
	return ms, nil
}

// SaveChunk stores the requests of one chunk and returns its key. Saving the same
// chunk again (a retried PrepareBatch) replaces it.
func (s *Store) SaveChunk(ctx context.Context, batchID string, c models.Chunk, reqs []models.ChannelRequest) (string, error) {
	key := s.chunkKey(batchID, c.Channel, c.Priority, c.N)
	vals := make([]any, len(reqs))
	for i, r := range reqs {
		b, err := json.Marshal(r)
		if err != nil {
			return "", fmt.Errorf("encode chunk %s: %w", key, err)
		}
		vals[i] = b
	}
	_, err := s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Del(ctx, key)
		p.RPush(ctx, key, vals...)
		p.Expire(ctx, key, BatchTTL)
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("save chunk %s: %w", key, err)
	}
	return key, nil
}

// Request reads request i of a stored chunk.
func (s *Store) Request(ctx context.Context, chunkKey string, i int) (models.ChannelRequest, error) {
	var r models.ChannelRequest
	body, err := s.rdb.LIndex(ctx, chunkKey, int64(i)).Bytes()
	if errors.Is(err, redis.Nil) {
		return r, fmt.Errorf("request %d of %s: %w", i, chunkKey, ErrBatchNotFound)
	}
	if err != nil {
		return r, fmt.Errorf("request %d of %s: %w", i, chunkKey, err)
	}
	if err := json.Unmarshal(body, &r); err != nil {
		return r, fmt.Errorf("decode request %d of %s: %w", i, chunkKey, err)
	}
	return r, nil
}

// CommittedVersions returns the ledger's committed version for each (cell, family),
// 0 where nothing was committed, in one round trip.
func (s *Store) CommittedVersions(ctx context.Context, cells []models.Cell, fams []models.Family) ([]int64, error) {
	cmds := make([]*redis.StringCmd, len(cells))
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, c := range cells {
			cmds[i] = p.HGet(ctx, s.ledgerKey(c, fams[i]), "v")
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("read ledger: %w", err)
	}
	out := make([]int64, len(cells))
	for i, cmd := range cmds {
		v, err := cmd.Int64()
		if errors.Is(err, redis.Nil) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("read ledger %s: %w", s.ledgerKey(cells[i], fams[i]), err)
		}
		out[i] = v
	}
	return out, nil
}

// LedgerEntry is what the ledger holds for one cell and family.
type LedgerEntry struct {
	Version        int64          `json:"version"`
	Values         models.ARILine `json:"values"`
	ConfirmationID string         `json:"confirmation_id"`
	CommittedAt    time.Time      `json:"committed_at"`
}

// Ledger reads one cell's entry; ok is false when nothing was committed.
func (s *Store) Ledger(ctx context.Context, c models.Cell, f models.Family) (LedgerEntry, bool, error) {
	var e LedgerEntry
	m, err := s.rdb.HGetAll(ctx, s.ledgerKey(c, f)).Result()
	if err != nil {
		return e, false, fmt.Errorf("read ledger: %w", err)
	}
	if len(m) == 0 {
		return e, false, nil
	}
	return ledgerEntry(m), true, nil
}

// ledgerEntry decodes a ledger hash written by Commit.
func ledgerEntry(m map[string]string) LedgerEntry {
	var e LedgerEntry
	e.Version, _ = strconv.ParseInt(m["v"], 10, 64)
	_ = json.Unmarshal([]byte(m["values"]), &e.Values)
	e.ConfirmationID = m["conf"]
	e.CommittedAt, _ = time.Parse(time.RFC3339Nano, m["at"])
	return e
}

// commitScript records a committed version per cell unless a newer one is already
// there; it returns, per key, 1 when a newer version had won (superseded).
var commitScript = redis.NewScript(`
local out = {}
for i, key in ipairs(KEYS) do
  local b = (i - 1) * 3
  local v = tonumber(ARGV[b + 1])
  local cur = tonumber(redis.call('HGET', key, 'v') or '0')
  if cur > v then
    out[i] = 1
  else
    redis.call('HSET', key, 'v', v, 'values', ARGV[b + 2], 'conf', ARGV[#ARGV - 1], 'at', ARGV[#ARGV])
    redis.call('EXPIREAT', key, ARGV[b + 3])
    out[i] = 0
  end
end
return out
`)

// Commit records the refs of r as committed with confirmation id conf, skipping any
// ref whose line index is in skip. It returns how many refs were committed and how
// many were superseded by a newer committed version.
func (s *Store) Commit(ctx context.Context, r models.ChannelRequest, conf string, skip map[int]bool, now time.Time) (committed, superseded int, err error) {
	var keys []string
	var args []any
	for _, ref := range r.Refs {
		if skip[ref.Line] {
			continue
		}
		line := r.Lines[ref.Line]
		values, err := json.Marshal(line)
		if err != nil {
			return 0, 0, fmt.Errorf("encode ledger values: %w", err)
		}
		cell := models.Cell{Channel: r.Channel, PropertyID: r.PropertyID, RoomTypeCode: line.RoomTypeCode,
			RatePlanCode: line.RatePlanCode, StayDate: ref.StayDate}
		keys = append(keys, s.ledgerKey(cell, r.Family))
		args = append(args, ref.Version, values, ref.StayDate.Time().Add(LedgerGrace).Unix())
	}
	if len(keys) == 0 {
		return 0, 0, nil
	}
	args = append(args, conf, now.UTC().Format(time.RFC3339Nano))
	flags, err := commitScript.Run(ctx, s.rdb, keys, args...).Int64Slice()
	if err != nil {
		return 0, 0, fmt.Errorf("commit ledger %s/%s: %w", r.Channel, r.PropertyID, err)
	}
	for _, f := range flags {
		if f == 1 {
			superseded++
		} else {
			committed++
		}
	}
	return committed, superseded, nil
}

// parkScript appends one dead-letter entry unless the same digest was parked before.
var parkScript = redis.NewScript(`
if redis.call('SET', KEYS[2], '1', 'NX', 'EX', ARGV[1]) then
  local args = {KEYS[1], 'MAXLEN', '~', ARGV[2], '*'}
  for i = 3, #ARGV do args[#args + 1] = ARGV[i] end
  return redis.call('XADD', unpack(args))
end
return ''
`)

// DeadLetter is one parked request (or some of its lines) with why it was parked.
type DeadLetter struct {
	ID       string                `json:"id"`
	BatchID  string                `json:"batch_id"`
	Reason   string                `json:"reason"`
	Status   int                   `json:"status,omitempty"`
	Message  string                `json:"message,omitempty"`
	At       time.Time             `json:"at"`
	Request  models.ChannelRequest `json:"request"`
	Channel  string                `json:"channel"`
	Property string                `json:"property_id"`
}

// Park appends d to its channel's dead-letter stream; digest identifies it so a
// retried activity parks it once. It returns the stream entry id ("" when it was
// already parked).
func (s *Store) Park(ctx context.Context, d DeadLetter, digest string) (string, error) {
	req, err := json.Marshal(d.Request)
	if err != nil {
		return "", fmt.Errorf("encode dead letter: %w", err)
	}
	key := s.dlqKey(d.Channel)
	id, err := parkScript.Run(ctx, s.rdb, []string{key, key + ":seen:" + digest},
		int64(BatchTTL/time.Second), DLQMaxLen,
		"batch_id", d.BatchID, "channel", d.Channel, "property_id", d.Property,
		"family", string(d.Request.Family), "reason", d.Reason, "status", d.Status,
		"message", d.Message, "at", d.At.UTC().Format(time.RFC3339Nano), "request", req).Text()
	if err != nil {
		return "", fmt.Errorf("park dead letter on %s: %w", d.Channel, err)
	}
	return id, nil
}

// DeadLetters reads up to count of a channel's oldest parked entries.
func (s *Store) DeadLetters(ctx context.Context, channel string, count int64) ([]DeadLetter, error) {
	msgs, err := s.rdb.XRangeN(ctx, s.dlqKey(channel), "-", "+", count).Result()
	if err != nil {
		return nil, fmt.Errorf("read dead letters of %s: %w", channel, err)
	}
	out := make([]DeadLetter, 0, len(msgs))
	for _, m := range msgs {
		d := DeadLetter{ID: m.ID, Channel: channel}
		str := func(k string) string { v, _ := m.Values[k].(string); return v }
		d.BatchID, d.Reason, d.Message, d.Property = str("batch_id"), str("reason"), str("message"), str("property_id")
		d.Status, _ = strconv.Atoi(str("status"))
		d.At, _ = time.Parse(time.RFC3339Nano, str("at"))
		_ = json.Unmarshal([]byte(str("request")), &d.Request)
		out = append(out, d)
	}
	return out, nil
}

// LedgerCell is one ledger entry with the cell and family it is for.
type LedgerCell struct {
	Cell   models.Cell
	Family models.Family
	Entry  LedgerEntry
}

// LedgerCells reads every ledger entry of a channel whose night lies in [from, to],
// sorted by property, room type, rate plan, night and family.
func (s *Store) LedgerCells(ctx context.Context, channel string, from, to models.Date) ([]LedgerCell, error) {
	prefix := s.prefix + "ledger:{" + channel + "}:"
	// A cluster client's SCAN would visit one node only; ScanKeys visits every master.
	found, err := dial.ScanKeys(ctx, s.rdb, prefix+"*")
	if err != nil {
		return nil, fmt.Errorf("scan ledger of %s: %w", channel, err)
	}
	var keys []string
	var cells []LedgerCell
	for _, key := range found {
		parts := strings.Split(strings.TrimPrefix(key, prefix), ":")
		if len(parts) != 5 {
			continue
		}
		night, err := models.ParseDate(parts[3])
		if err != nil || night.Before(from) || night.After(to) {
			continue
		}
		keys = append(keys, key)
		cells = append(cells, LedgerCell{Family: models.Family(parts[4]), Cell: models.Cell{Channel: channel,
			PropertyID: parts[0], RoomTypeCode: parts[1], RatePlanCode: parts[2], StayDate: night}})
	}
	cmds := make([]*redis.MapStringStringCmd, len(keys))
	if _, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, k := range keys {
			cmds[i] = p.HGetAll(ctx, k)
		}
		return nil
	}); err != nil {
		return nil, fmt.Errorf("read ledger of %s: %w", channel, err)
	}
	for i, cmd := range cmds {
		cells[i].Entry = ledgerEntry(cmd.Val())
	}
	sort.Slice(cells, func(i, j int) bool {
		a, b := cells[i], cells[j]
		if a.Cell.PropertyID != b.Cell.PropertyID {
			return a.Cell.PropertyID < b.Cell.PropertyID
		}
		if a.Cell.RoomTypeCode != b.Cell.RoomTypeCode {
			return a.Cell.RoomTypeCode < b.Cell.RoomTypeCode
		}
		if a.Cell.RatePlanCode != b.Cell.RatePlanCode {
			return a.Cell.RatePlanCode < b.Cell.RatePlanCode
		}
		if a.Cell.StayDate != b.Cell.StayDate {
			return a.Cell.StayDate.Before(b.Cell.StayDate)
		}
		return a.Family < b.Family
	})
	return cells, nil
}
