package activities

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/paritysync/paritysync/models"
)

// redisCounter is a go-redis hook counting round trips (a command alone, or a
// pipeline) and commands, and noting when each decision that granted a slot (a
// reserve answering send) came back.
type redisCounter struct {
	roundTrips, commands atomic.Int64
	mu                   sync.Mutex
	decided              []time.Time
}

func (c *redisCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *redisCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() != "hello" { // a new connection's handshake, not a call
			c.roundTrips.Add(1)
			c.commands.Add(1)
		}
		return next(ctx, cmd)
	}
}

func (c *redisCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if cmds[0].Name() != "client" { // a new connection's handshake, not a call
			c.roundTrips.Add(1)
			c.commands.Add(int64(len(cmds)))
		}
		err := next(ctx, cmds)
		at := time.Now()
		for _, cmd := range cmds {
			if r, ok := cmd.(*redis.Cmd); ok && cmd.Name() == "evalsha" {
				if v, _ := r.Slice(); len(v) > 0 && v[0] == "send" {
					c.mu.Lock()
					c.decided = append(c.decided, at)
					c.mu.Unlock()
				}
			}
		}
		return err
	}
}

func (c *redisCounter) reset() { c.roundTrips.Store(0); c.commands.Store(0) }

// countedRedis is a client of the test's Redis whose calls c counts.
func countedRedis(t *testing.T, c *redisCounter) *redis.Client {
	t.Helper()
	rdb, _ := testRedisClient(t)
	counted := redis.NewClient(rdb.Options())
	counted.AddHook(c)
	t.Cleanup(func() { _ = counted.Close() })
	return counted
}

// pgCounter is a pgx tracer counting transactions (BEGIN … COMMIT, or a statement
// outside one) and statements, and delaying every write by slowWrites when set.
type pgCounter struct {
	mu           sync.Mutex
	inTx         map[*pgx.Conn]bool
	transactions int
	statements   int
	slowWrites   atomic.Int64 // a time.Duration
}

func (c *pgCounter) TraceQueryStart(ctx context.Context, conn *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	sql := strings.ToLower(strings.TrimSpace(data.SQL))
	c.mu.Lock()
	if c.inTx == nil {
		c.inTx = map[*pgx.Conn]bool{}
	}
	switch {
	case strings.HasPrefix(sql, "begin"):
		c.transactions++
		c.inTx[conn] = true
	case strings.HasPrefix(sql, "commit"), strings.HasPrefix(sql, "rollback"):
		c.inTx[conn] = false
	default:
		c.statements++
		if !c.inTx[conn] {
			c.transactions++
		}
	}
	c.mu.Unlock()
	if d := time.Duration(c.slowWrites.Load()); d > 0 && isWrite(sql) {
		time.Sleep(d)
	}
	return ctx
}

func (c *pgCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (c *pgCounter) counts() (transactions, statements int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.transactions, c.statements
}

func (c *pgCounter) reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.transactions, c.statements = 0, 0
}

func isWrite(sql string) bool {
	for _, w := range []string{"insert ", "update ", "delete "} {
		if strings.Contains(sql, w) {
			return true
		}
	}
	return false
}

// laneBatch prepares a batch of n one-night requests, one per property, and returns
// its only chunk.
func (e *activityEnv) laneBatch(batch string, n int) models.Chunk {
	e.t.Helper()
	ms := make([]models.Mutation, n)
	for i := range ms {
		ms[i] = e.mutation(fmt.Sprintf("%s-%d", batch, i), 3, 1, func(m *models.Mutation) {
			m.PropertyID = fmt.Sprintf("prop_%08x", i+1)
			m.Amount, m.Currency = decimalPtr("90.00"), "EUR"
		})
	}
	c := e.preparedChunk(batch, ms...)
	if c.Requests != n {
		e.t.Fatalf("chunk of %d requests, want %d", c.Requests, n)
	}
	return c
}

// runLane pushes every request of chunk c in order as one ChannelSync lane does:
// each push names the next request, whose slot it holds.
func (e *activityEnv) runLane(batch string, c models.Chunk) {
	e.t.Helper()
	for i := range c.Requests {
		in := models.PushInput{BatchID: batch, ChunkKey: c.Key, Index: i, Reservation: fmt.Sprintf("%s/%d", batch, i)}
		if i+1 < c.Requests {
			in.Next, in.NextReservation = i+1, fmt.Sprintf("%s/%d", batch, i+1)
		}
		res, err := e.push(in)
		if err != nil || res.Committed != 1 {
			e.t.Fatalf("push %d: %+v, %v", i, res, err)
		}
		if i+1 < c.Requests && res.Next == nil {
			e.t.Fatalf("push %d held no slot for the next request", i)
		}
	}
}

// TestPushRoundTrips counts what a delivered request costs on a worker that already
// pushed to the channel: Redis round trips (a pipeline is one) and PostgreSQL
// transactions (a statement outside BEGIN is one), over a lane of 40 requests.
func TestPushRoundTrips(t *testing.T) {
	rc, pc := &redisCounter{}, &pgCounter{}
	e := newActivityEnv(t, envOptions{limiterRDB: countedRedis(t, rc), pgTracer: pc})
	// The worker's first push checks the channel's gate and learns its room rates
	// and batch: one-time costs, left out of the per-request figures.
	e.runLane("b-warm", e.laneBatch("b-warm", 2))
	const n = 40
	c := e.laneBatch("b-lane", n)
	rc.reset()
	pc.reset()
	e.runLane("b-lane", c)

	txs, stmts := pc.counts()
	perTx, perStmt := float64(txs)/n, float64(stmts)/n
	perRT, perCmd := float64(rc.roundTrips.Load())/n, float64(rc.commands.Load())/n
	t.Logf("per delivered request: %.2f Redis round trips (%.2f commands), %.2f PostgreSQL transactions (%.2f statements)",
		perRT, perCmd, perTx, perStmt)
	if perRT > 2 {
		t.Errorf("%.2f Redis round trips per delivered request, want at most 2", perRT)
	}
	if perTx > 2 {
		t.Errorf("%.2f PostgreSQL transactions per delivered request, want at most 2", perTx)
	}
	if got := e.simRequests(); got != n+2 {
		t.Errorf("simulator received %d requests, want %d", got, n+2)
	}
}

// receiveTimes wraps a handler, noting when each push reached it.
type receiveTimes struct {
	mu sync.Mutex
	at []time.Time
}

func (r *receiveTimes) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method != http.MethodGet {
			r.mu.Lock()
			r.at = append(r.at, time.Now())
			r.mu.Unlock()
		}
		h.ServeHTTP(w, req)
	})
}

// TestPushCallStartsWithinTheMarginWhenPostgresIsSlow makes every PostgreSQL write
// take 700 ms, longer than the limiter's 500 ms margin, and checks that each push
// still reaches the channel within the margin of the decision that granted its slot:
// no write stands between the two.
func TestPushCallStartsWithinTheMarginWhenPostgresIsSlow(t *testing.T) {
	if testing.Short() {
		t.Skip("a real-time run with every PostgreSQL write delayed 700 ms (make test runs it)")
	}
	rc, pc, rt := &redisCounter{}, &pgCounter{}, &receiveTimes{}
	e := newActivityEnv(t, envOptions{limiterRDB: countedRedis(t, rc), pgTracer: pc, handler: rt.wrap})
	const n, slow = 4, 700 * time.Millisecond
	c := e.laneBatch("b-slow", n)
	pc.slowWrites.Store(int64(slow))
	start := time.Now()
	e.runLane("b-slow", c)
	if took := time.Since(start); took < 2*n*slow {
		t.Fatalf("%d pushes took %s: the writes were not slowed", n, took)
	}
	rc.mu.Lock()
	decided := rc.decided
	rc.mu.Unlock()
	if len(rt.at) != n || len(decided) != n {
		t.Fatalf("%d requests received after %d decisions, want %d of each", len(rt.at), len(decided), n)
	}
	margin := e.lim.Margin()
	for i, at := range rt.at {
		gap := at.Sub(decided[i])
		t.Logf("request %d reached the channel %s after its decision", i, gap.Round(time.Microsecond))
		if gap < 0 || gap > margin {
			t.Errorf("request %d reached the channel %s after its decision, want within the %s margin", i, gap, margin)
		}
	}
}

// TestPushLateForItsSlotAsksForANewOne holds the first connection to the channel
// past the margin: the call is cancelled before anything is written, the push asks
// for a new slot and sends on it, and the channel sees one request.
func TestPushLateForItsSlotAsksForANewOne(t *testing.T) {
	rc, rt := &redisCounter{}, &receiveTimes{}
	var dials atomic.Int32
	slowFirstDial := func(srv *httptest.Server) *http.Client {
		var d net.Dialer
		return &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if dials.Add(1) == 1 {
				select {
				case <-ctx.Done():
					return nil, ctx.Err()
				case <-time.After(700 * time.Millisecond):
				}
			}
			return d.DialContext(ctx, network, addr)
		}}}
	}
	e := newActivityEnv(t, envOptions{limiterRDB: countedRedis(t, rc), handler: rt.wrap, client: slowFirstDial})
	c := e.laneBatch("b-late", 1)
	res, err := e.push(models.PushInput{BatchID: "b-late", ChunkKey: c.Key, Reservation: "b-late/0"})
	if err != nil || res.Committed != 1 {
		t.Fatalf("push: %+v, %v; want committed on a new slot", res, err)
	}
	rc.mu.Lock()
	decided := rc.decided
	rc.mu.Unlock()
	if len(decided) != 2 {
		t.Fatalf("%d decisions, want 2 (the late one, then a new slot)", len(decided))
	}
	if len(rt.at) != 1 {
		t.Fatalf("channel received %d requests, want 1", len(rt.at))
	}
	if gap := rt.at[0].Sub(decided[1]); gap > e.lim.Margin() {
		t.Errorf("request reached the channel %s after its new slot's decision, want within %s", gap, e.lim.Margin())
	}
	st := e.limiterStatus()
	if st.InWindow != 2 {
		t.Errorf("window holds %d slots, want 2: the late slot stays spent", st.InWindow)
	}
}

// TestPushDeliversTheLanesNextRequestsWhoseSlotsAreNear hands one push the lane's
// next requests (Next, then Then): each slot is due at once, so the one attempt
// delivers them all, each through its own decision, and holds no further slot.
func TestPushDeliversTheLanesNextRequestsWhoseSlotsAreNear(t *testing.T) {
	e := newActivityEnv(t, envOptions{})
	const batch, n = "b-chain", 5
	c := e.laneBatch(batch, n)
	id := func(i int) string { return fmt.Sprintf("%s/%d", batch, i) }
	res, err := e.push(models.PushInput{BatchID: batch, ChunkKey: c.Key, Index: 0, Reservation: id(0),
		Next: 1, NextReservation: id(1), Then: []int{2, 3, 4}, ThenReservations: []string{id(2), id(3), id(4)}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Committed != 1 || len(res.Chained) != n-1 {
		t.Fatalf("push: committed %d, chained %d, want 1 and %d", res.Committed, len(res.Chained), n-1)
	}
	for k, r := range res.Chained {
		if r.Committed != 1 || r.Next != nil {
			t.Errorf("chained push %d: %+v, want one committed update and no slot of its own", k+1, r)
		}
	}
	if res.Next != nil {
		t.Errorf("a slot held after the last request: %+v", res.Next)
	}
	if got := e.simRequests(); got != n {
		t.Errorf("simulator received %d requests, want %d", got, n)
	}
}

// TestPushLeavesAFarSlotToTheLane: on a channel whose next slot is further away
// than the short wait, the push delivers its own request, holds the next one's slot
// and hands the rest back (no chained push).
func TestPushLeavesAFarSlotToTheLane(t *testing.T) {
	e := newActivityEnv(t, envOptions{channel: func(c *models.ChannelConfig) {
		c.RatePerMinute, c.Burst = 12, 3 // a slot every 5 s once the burst bulk work may take is spent
	}})
	const batch = "b-far"
	c := e.laneBatch(batch, 3)
	id := func(i int) string { return fmt.Sprintf("%s/%d", batch, i) }
	in := models.PushInput{BatchID: batch, ChunkKey: c.Key, Index: 0, Reservation: id(0),
		Next: 1, NextReservation: id(1), Then: []int{2}, ThenReservations: []string{id(2)}}
	res, err := e.push(in)
	if err == nil && res.Deferred != nil {
		// Bulk work leaves the burst alone: wait for the first slot, as a lane would.
		time.Sleep(time.Duration(res.Deferred.Wait))
		res, err = e.push(in)
	}
	if err != nil {
		t.Fatal(err)
	}
	if res.Committed != 1 || len(res.Chained) != 0 {
		t.Fatalf("push: committed %d, chained %d, want 1 and 0 (%+v)", res.Committed, len(res.Chained), res.Deferred)
	}
	if res.Next == nil || res.Next.Index != 1 || res.Next.Wait <= models.DefaultShortWait {
		t.Fatalf("next slot %+v, want request 1's, more than %s away", res.Next, models.DefaultShortWait)
	}
	if got := e.simRequests(); got != 1 {
		t.Errorf("simulator received %d requests, want 1", got)
	}
}
