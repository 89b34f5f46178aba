package store

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/paritysync/paritysync/models"
)

// statementLog is a pgx tracer that keeps every statement (and its arguments) sent
// while on.
type statementLog struct {
	mu    sync.Mutex
	on    bool
	stmts []loggedStatement
}

type loggedStatement struct {
	sql  string
	args []any
}

func (l *statementLog) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	sql := strings.ToLower(strings.TrimSpace(data.SQL))
	if strings.HasPrefix(sql, "begin") || strings.HasPrefix(sql, "commit") || strings.HasPrefix(sql, "rollback") {
		return ctx
	}
	l.mu.Lock()
	if l.on {
		l.stmts = append(l.stmts, loggedStatement{data.SQL, data.Args})
	}
	l.mu.Unlock()
	return ctx
}

func (l *statementLog) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (l *statementLog) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}

// TraceBatchQuery keeps each statement of a batch as if sent alone.
func (l *statementLog) TraceBatchQuery(_ context.Context, _ *pgx.Conn, data pgx.TraceBatchQueryData) {
	l.mu.Lock()
	if l.on {
		l.stmts = append(l.stmts, loggedStatement{data.SQL, data.Args})
	}
	l.mu.Unlock()
}

func (l *statementLog) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// loadProductionShape fills the schema as a running system's would look, sized so
// that the planner prefers an index wherever a statement offers one: a channel's
// cells over 200 nights (past nights as a daily prune leaves them), 36 days of
// batches and outcomes, confirmations up to a year ahead, acknowledged dead letters
// over 36 days.
func loadProductionShape(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	load(t, pool,
		`INSERT INTO channels (slug) VALUES ('load_a'), ('load_b')`,
		`INSERT INTO room_rates (channel, property_id, room_type, rate_plan)
			SELECT c.id, 'prop_' || lpad(to_hex(p), 8, '0'), 'RT' || k, 'BAR'
			FROM channels c, generate_series(1, 50) p, generate_series(1, 2) k`,
		`INSERT INTO cells (room_rate, family, night, desired_version, sent_version, acked_version)
			SELECT r.id, f, d::date, 1, 1, 1
			FROM room_rates r, unnest(enum_range(NULL::family)) f,
				generate_series(current_date - 36, current_date + 163, interval '1 day') d`,
		`INSERT INTO batches (batch_id, created_at, mutations, payload)
			SELECT 'load-' || i, now() - (i % 36) * interval '1 day' - interval '1 hour', 3,
				CASE WHEN i % 200 = 0 THEN '\x00'::bytea END
			FROM generate_series(1, 20000) i`,
		`INSERT INTO outcomes (batch, mutation_id, family, channel, outcome)
			SELECT b.id, 'm-' || k, 'rates', 1, 'committed' FROM batches b, generate_series(1, 3) k`,
		`INSERT INTO outcome_counts (batch, channel, outcome, n)
			SELECT batch, channel, outcome, count(*) FROM outcomes GROUP BY 1, 2, 3`,
		`INSERT INTO batch_requests (batch, channel, priority, chunk, idx, body)
			SELECT b.id, 1, 5, 0, k, '\x00'::bytea FROM batches b, generate_series(0, 4) k WHERE b.payload IS NOT NULL`,
		`INSERT INTO confirmations (channel, code, confirmed_at, last_night)
			SELECT 1, 'conf-' || i, now() - (i % 36) * interval '1 day', current_date - 36 + (i % 400)
			FROM generate_series(1, 20000) i`,
		`INSERT INTO dead_letters (batch_id, channel, property_id, family, reason, request, request_key,
				mutation_ids, stay_dates, parked_at, acked_at)
			SELECT 'load-' || i, 1, 'prop_00000001', 'rates', 'rejected', '{}'::jsonb, decode(md5(i::text), 'hex'),
				'{}', '{}', now(), CASE WHEN i % 10 <> 0 THEN now() - (i % 36) * interval '1 day' - interval '1 hour' END
			FROM generate_series(1, 12000) i`,
		`ANALYZE`,
	)
}

// load runs each statement of sqls in turn.
func load(t *testing.T, pool *pgxpool.Pool, sqls ...string) {
	t.Helper()
	for _, sql := range sqls {
		if _, err := pool.Exec(context.Background(), sql); err != nil {
			t.Fatalf("load: %v\n%s", err, sql)
		}
	}
}

// tracedStore is a migrated store in a schema of its own, loaded in a production
// shape (loadProductionShape), whose statements the log keeps while on.
func tracedStore(t *testing.T) (*Store, *statementLog) {
	t.Helper()
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(testSchema(t))
	if err != nil {
		t.Fatal(err)
	}
	log := &statementLog{}
	cfg.ConnConfig.Tracer = log
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	s := New(pool)
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	loadProductionShape(t, pool)
	return s, log
}

// explainPlan is the planner's plan for sql with args, with sequential scans off
// if noSeqScan (to ask for the statement's index path).
func explainPlan(t *testing.T, pool *pgxpool.Pool, sql string, args []any, noSeqScan bool) planNode {
	t.Helper()
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if noSeqScan {
		if _, err := tx.Exec(ctx, `SET LOCAL enable_seqscan = off`); err != nil {
			t.Fatal(err)
		}
	}
	var plan []byte
	if err := tx.QueryRow(ctx, "EXPLAIN (FORMAT JSON) "+sql, args...).Scan(&plan); err != nil {
		t.Fatalf("explain: %v\n%s", err, sql)
	}
	var doc []struct{ Plan planNode }
	if err := json.Unmarshal(plan, &doc); err != nil || len(doc) != 1 {
		t.Fatalf("plan %s: %v", plan, err)
	}
	return doc[0].Plan
}

// largeTable is the size from which a table must never be read whole by a statement
// on the push or prune path. Smaller tables (channels, room_rates: one row per room
// rate, no night) are read whole where a statement wants every room rate.
const largeTable = 10000

// TestStatementsUseIndexes runs the push path (record sending, acknowledge twice,
// park, tallies), the reconciliation and gate-rebuild reads and Prune against a
// schema loaded in a production shape, keeps every statement they send, and fails
// if the planner reads a large table whole (Seq Scan) for any of them. The planner
// runs as configured (enable_seqscan on): each statement must offer it an index
// that beats a scan.
func TestStatementsUseIndexes(t *testing.T) {
	if testing.Short() {
		t.Skip("loads about 250k rows")
	}
	ctx := context.Background()
	s, log := tracedStore(t)

	today := models.DateOf(time.Now())
	key, req := chunkAhead(t, s, "explain")

	log.on = true
	if _, _, err := s.RecordSending(ctx, key, 0, nil, 1); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.RecordSending(ctx, key, 1, &req); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Requests(ctx, key, 0, 1); err != nil {
		t.Fatal(err)
	}
	for range 2 { // the second is a retry: it reads its own outcomes back
		if _, _, err := s.RecordAcknowledged(ctx, Ack{BatchID: "explain", Request: req, ConfirmationID: "conf-x"}); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := s.ParkDeadLetter(ctx, DeadLetter{BatchID: "explain", Reason: "auth", Request: req}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.BatchCounts(ctx, "explain"); err != nil {
		t.Fatal(err)
	}
	if err := s.CellStates(ctx, "load_a", today, today.AddDays(30), func(CellState) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if err := s.SentVersions(ctx, "load_a", today.AddDays(-1), func(SentVersion) error { return nil }); err != nil {
		t.Fatal(err)
	}
	// A batch's end with its callback, the listings (an operator's, a tenant's, the
	// next page) and the callback outbox's claim and record.
	if err := s.FinishBatch(ctx, "explain", "done", &CallbackEvent{EventID: "evt_explain", Tenant: "acme",
		URL: "https://pms.example/hooks/", Body: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	page, next, err := s.ListBatches(ctx, BatchFilter{AllTenants: true, Limit: 100})
	if err != nil || len(page) != 100 || next == "" {
		t.Fatalf("list batches: %d, next %q, %v", len(page), next, err)
	}
	if _, _, err := s.ListBatches(ctx, BatchFilter{AllTenants: true, Limit: 100, Cursor: next}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.ListBatches(ctx, BatchFilter{Tenant: "acme", Limit: 100, State: "done"}); err != nil {
		t.Fatal(err)
	}
	// The batch sweeper's claim and record, and a property's parity lag.
	if _, err := s.ClaimRunning(ctx, 100, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := s.EndedUnseen(ctx, "load-7", "terminated"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ParityLag(ctx, time.Hour, "prop_00000001"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ClaimCallbacks(ctx, 20, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := s.CallbackAttempted(ctx, "evt_explain", true, "", time.Time{}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Prune(ctx, DefaultRetention()); err != nil {
		t.Fatal(err)
	}
	log.on = false

	large := map[string]bool{}
	rows, _ := s.pool.Query(ctx, `SELECT relname FROM pg_class
WHERE relnamespace = current_schema()::regnamespace AND relkind = 'r' AND reltuples >= $1`, largeTable)
	var name string
	if _, err := pgx.ForEachRow(rows, []any{&name}, func() error { large[name] = true; return nil }); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"cells", "outcomes", "batches", "confirmations", "dead_letters"} {
		if !large[want] {
			t.Fatalf("table %s was not loaded large enough to check", want)
		}
	}
	columns := map[string][]string{} // index → its key columns
	rows, _ = s.pool.Query(ctx, `SELECT i.indexrelid::regclass::text, array_agg(a.attname::text ORDER BY k.n)
FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid
CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, n)
JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
WHERE c.relnamespace = current_schema()::regnamespace GROUP BY 1`)
	var cols []string
	if _, err := pgx.ForEachRow(rows, []any{&name, &cols}, func() error { columns[name] = cols; return nil }); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	natural, ranged := 0, 0
	for _, st := range log.stmts {
		if seen[st.sql] {
			continue
		}
		seen[st.sql] = true
		if len(explainPlan(t, s.pool, st.sql, st.args, false).seqScans(large)) == 0 {
			natural++
			continue
		}
		// At this scale (cells: 120k rows in about 1,000 pages) a scan is cheaper
		// than a few hundred index ranges, and the planner rightly takes it; in
		// production the table is a hundred times larger and the ranges win. So
		// the statement is asked for its index path, which must range on every key
		// column of each index it reads a large table by: bounded by the rows the
		// statement touches, not by every night of a room rate.
		plan := explainPlan(t, s.pool, st.sql, st.args, true)
		problems := plan.seqScans(large)
		problems = append(problems, plan.looseIndexScans(large, columns)...)
		if len(problems) > 0 {
			t.Errorf("no bounded index path: %s\n%s", strings.Join(problems, "; "), st.sql)
			continue
		}
		ranged++
	}
	t.Logf("%d distinct statements against tables of at least %d rows (%v): %d read them by index as planned, "+
		"%d by an index path ranging on every key column (a scan is cheaper at this scale)",
		len(seen), largeTable, large, natural, ranged)
}

// planNode is one node of an EXPLAIN (FORMAT JSON) plan.
type planNode struct {
	NodeType  string     `json:"Node Type"`
	Relation  string     `json:"Relation Name"`
	Index     string     `json:"Index Name"`
	IndexCond string     `json:"Index Cond"`
	Plans     []planNode `json:"Plans"`
}

// looseIndexScans lists the index reads of large tables whose condition leaves a key
// column of the index open (a full index scan, or a range over some columns only).
func (n planNode) looseIndexScans(large map[string]bool, columns map[string][]string) []string {
	var out []string
	if strings.HasPrefix(n.NodeType, "Index") || n.NodeType == "Bitmap Index Scan" {
		if n.Relation == "" || large[n.Relation] {
			for _, col := range columns[n.Index] {
				if !strings.Contains(n.IndexCond, col+" ") {
					out = append(out, fmt.Sprintf("%s by %s leaves %s open (cond %q)", n.NodeType, n.Index, col, n.IndexCond))
					break
				}
			}
		}
	}
	for _, c := range n.Plans {
		out = append(out, c.looseIndexScans(large, columns)...)
	}
	return out
}

// seqScans lists the large relations the plan reads whole.
func (n planNode) seqScans(large map[string]bool) []string {
	var out []string
	if n.NodeType == "Seq Scan" && large[n.Relation] {
		out = append(out, n.Relation)
	}
	for _, c := range n.Plans {
		out = append(out, c.seqScans(large)...)
	}
	return out
}
