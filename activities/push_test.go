package activities

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
	"github.com/shopspring/decimal"
	"go.temporal.io/sdk/temporal"

	"github.com/paritysync/paritysync/activities/store"
	"github.com/paritysync/paritysync/channels"
	"github.com/paritysync/paritysync/limiter"
	"github.com/paritysync/paritysync/models"
	"github.com/paritysync/paritysync/otasim/sim"
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
			if r, ok := cmd.(*redis.Cmd); ok && (cmd.Name() == "evalsha" || cmd.Name() == "fcall") {
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

// pgCounter is a pgx tracer counting transactions (BEGIN … COMMIT, a statement or a
// batch outside one) and statements, and delaying every write (or batch that
// writes) by slowWrites when set.
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

// TraceBatchStart counts a batch's statements, and the batch as a transaction of
// its own outside one (the server runs it in one implicit transaction); a batch
// that writes is delayed by slowWrites once.
func (c *pgCounter) TraceBatchStart(ctx context.Context, conn *pgx.Conn, data pgx.TraceBatchStartData) context.Context {
	writes := false
	c.mu.Lock()
	if !c.inTx[conn] {
		c.transactions++
	}
	for _, q := range data.Batch.QueuedQueries {
		c.statements++
		writes = writes || isWrite(strings.ToLower(q.SQL))
	}
	c.mu.Unlock()
	if d := time.Duration(c.slowWrites.Load()); d > 0 && writes {
		time.Sleep(d)
	}
	return ctx
}

func (c *pgCounter) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}

func (c *pgCounter) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

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

func TestPushRequestCommittedRecordsAcknowledgedStateAndChannel(t *testing.T) {
	t.Parallel()
	e := newActivityEnv(t, envOptions{})
	ctx := context.Background()
	var ms []models.Mutation
	for n := range 3 {
		ms = append(ms, e.mutation("c-"+string(rune('a'+n)), 4+n, 6, func(m *models.Mutation) {
			m.Amount, m.Currency = decimalPtr("210.50"), "EUR"
			m.Inventory = ptr(2 + n)
		}))
	}
	plan := e.prepare(models.BatchSyncInput{BatchID: "b-commit", Mutations: ms})
	if len(plan.Chunks) != 1 || plan.Chunks[0].Requests != 2 {
		t.Fatalf("plan %+v, want one chunk of a rates and an availability request", plan)
	}
	chunk := plan.Chunks[0]
	for i, req := range e.chunkRequests(chunk) {
		res, err := e.push(models.PushInput{BatchID: "b-commit", ChunkKey: chunk.Key, Index: i})
		if err != nil {
			t.Fatalf("push %d: %v", i, err)
		}
		if res.ConfirmationID == "" || res.Committed != len(req.Refs) || res.Superseded != 0 || len(res.Failed) != 0 {
			t.Fatalf("push %d result %+v, want %d committed", i, res, len(req.Refs))
		}
		for _, ref := range req.Refs {
			cell := models.Cell{Channel: testChannel, PropertyID: testProperty, RoomTypeCode: testRoom, RatePlanCode: testPlan, StayDate: ref.StayDate}
			got, ok := e.cellState(cell, req.Family)
			if !ok {
				t.Fatalf("no state for %s %s", ref.StayDate, req.Family)
			}
			want := req.Lines[ref.Line]
			want.From, want.To = ref.StayDate, ref.StayDate
			wantValues, _ := json.Marshal(want)
			gotValues, _ := json.Marshal(got.Acked)
			if got.Acked.Version != 6 || got.SentVersion != 6 || got.Desired.Version != 6 || got.ConfirmationID != res.ConfirmationID ||
				string(gotValues) != string(wantValues) {
				t.Errorf("state %s %s = %+v, want desired, sent and acknowledged version 6, confirmation %s, values %s",
					ref.StayDate, req.Family, got, res.ConfirmationID, wantValues)
			}
		}
	}

	st, err := e.acts.Client.ReadBack(ctx, testChannel, testProperty, e.today.AddDays(4), e.today.AddDays(6))
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Cells) != 3 {
		t.Fatalf("channel holds %d cells, want 3: %+v", len(st.Cells), st.Cells)
	}
	for n, c := range st.Cells {
		if c.Date != e.today.AddDays(4+n) || c.Amount == nil || !c.Amount.Equal(decimal.RequireFromString("210.5")) ||
			c.Currency != "EUR" || c.Inventory == nil || *c.Inventory != 2+n || c.Version != 6 {
			t.Errorf("channel cell %d = %+v, want 210.50 EUR, inventory %d, version 6", n, c, 2+n)
		}
	}
}

func TestPushRequestHeldSlotMakesNoCall(t *testing.T) {
	t.Parallel()
	e := newActivityEnv(t, envOptions{slow: true})
	ctx := context.Background()
	chunk := e.preparedChunk("b-deny", e.mutation("d-1", 3, 1, withRate("80.00")))
	// Other requests hold the window's slots for the next half minute.
	for i := range 40 {
		_, err := e.lim.Reserve(ctx, limiter.Request{Channel: testChannel, Family: models.FamilyRates,
			Property: testProperty, Priority: 3, Cost: 1, ID: fmt.Sprintf("other/%d", i), Hold: true})
		if err != nil {
			t.Fatal(err)
		}
	}
	res, err := e.push(models.PushInput{BatchID: "b-deny", ChunkKey: chunk.Key, Reservation: "b-deny/0"})
	f := deferralOf(t, res, err)
	if time.Duration(f.Wait) <= models.DefaultShortWait || !f.Held || f.Paused != "" {
		t.Errorf("deferral %+v, want a held slot beyond the short wait and no pause", f)
	}
	if res.About != "push rates "+testProperty+" "+e.today.AddDays(3).String()+", 1 line" {
		t.Errorf("about %q", res.About)
	}
	if n := e.simRequests(); n != 0 {
		t.Errorf("simulator saw %d requests before the slot", n)
	}
}

func TestPushRequestOlderVersionAfterNewerSentIsNeverSent(t *testing.T) {
	t.Parallel()
	e := newActivityEnv(t, envOptions{})
	older := e.preparedChunk("b-old", e.mutation("o-1", 3, 5, withRate("80.00")))
	newer := e.preparedChunk("b-new", e.mutation("n-1", 3, 6, withRate("95.00")))
	res, err := e.push(models.PushInput{BatchID: "b-new", ChunkKey: newer.Key, Reservation: "b-new/0"})
	if err != nil || res.Committed != 1 {
		t.Fatalf("newer: %+v, %v", res, err)
	}
	res, err = e.push(models.PushInput{BatchID: "b-old", ChunkKey: older.Key, Reservation: "b-old/0"})
	if err != nil || res.Superseded != 1 || res.Committed != 0 {
		t.Fatalf("older after newer: %+v, %v; want superseded", res, err)
	}
	st := e.sim.Stats()[testChannel]
	if st.Requests != 1 || st.StaleReceived != 0 {
		t.Fatalf("simulator saw %d requests, %d stale; want 1 and 0", st.Requests, st.StaleReceived)
	}
}

func TestPushRequestReservesTheLanesNextSlot(t *testing.T) {
	e := newActivityEnv(t, envOptions{})
	plan := e.prepare(models.BatchSyncInput{BatchID: "b-next", Mutations: []models.Mutation{
		e.mutation("x-1", 3, 1, withRate("80.00")),
		e.mutation("x-2", 3, 1, func(m *models.Mutation) { m.Inventory = ptr(4) }),
	}})
	if len(plan.Chunks) != 1 || plan.Chunks[0].Requests != 2 {
		t.Fatalf("plan %+v, want one chunk of 2 requests", plan)
	}
	c := plan.Chunks[0]
	res, err := e.push(models.PushInput{BatchID: "b-next", ChunkKey: c.Key, Reservation: "b-next/0",
		Next: 1, NextReservation: "b-next/1"})
	if err != nil || res.Next == nil || res.Next.Index != 1 {
		t.Fatalf("first push: %+v, %v; want the next slot", res, err)
	}
	if n := e.simRequests(); n != 1 {
		t.Fatalf("holding the next slot sent it: %d requests", n)
	}
	res, err = e.push(models.PushInput{BatchID: "b-next", ChunkKey: c.Key, Index: 1, Reservation: "b-next/1"})
	if err != nil || res.Committed != 1 {
		t.Fatalf("second push on its held slot: %+v, %v", res, err)
	}
	st := e.limiterStatus()
	if st.InWindow != 2 {
		t.Fatalf("window holds %d slots, want 2", st.InWindow)
	}
}

func TestPushRequestPausedChannelMakesNoCall(t *testing.T) {
	t.Parallel()
	e := newActivityEnv(t, envOptions{})
	chunk := e.preparedChunk("b-pause", e.mutation("p-1", 3, 1, withRate("80.00")))
	if err := e.lim.Pause(context.Background(), testChannel, "maintenance window"); err != nil {
		t.Fatal(err)
	}
	res, err := e.push(models.PushInput{BatchID: "b-pause", ChunkKey: chunk.Key})
	f := deferralOf(t, res, err)
	if f.Wait <= 0 || f.Paused != "maintenance window" {
		t.Errorf("deferral %+v, want a wait and the pause reason", f)
	}
	if n := e.simRequests(); n != 0 {
		t.Errorf("simulator saw %d requests on a paused channel", n)
	}
}

func TestPushRequestThrottledWritesChannelBackoff(t *testing.T) {
	t.Parallel()
	e := newActivityEnv(t, envOptions{sim: func(c *sim.Config) { c.Faults = sim.Faults{StormSeconds: 30} }})
	_, err := e.pushNew("b-429", e.mutation("t-1", 3, 1, withRate("80.00")))
	f := failureOf(t, err, models.ErrThrottled)
	if !f.ServerWait || f.Wait <= 0 || f.Wait > 30*time.Second || f.Status != 429 {
		t.Errorf("failure %+v, want status 429 and the server's wait of at most 30 s", f)
	}
	st := e.limiterStatus()
	if st.PausedFor <= 0 || st.PausedFor > 30*time.Second {
		t.Errorf("limiter paused for %s, want the channel back-off of up to 30 s", st.PausedFor)
	}
	if n := e.simRequests(); n != 1 {
		t.Errorf("simulator saw %d requests, want 1", n)
	}
}

func TestPushRequestServerErrorIsTransient(t *testing.T) {
	t.Parallel()
	e := newActivityEnv(t, envOptions{sim: func(c *sim.Config) { c.Faults = sim.Faults{ErrorRatio: 1} }})
	_, err := e.pushNew("b-5xx", e.mutation("s-1", 3, 1, withRate("80.00")))
	f := failureOf(t, err, models.ErrTransient)
	if f.Status < 500 || f.Status > 599 {
		t.Errorf("failure %+v, want a 5xx status", f)
	}
	if got, _ := e.cellState(e.mutation("s-1", 3, 1, nil).Cell(), models.FamilyRates); got.Acked.Version != 0 || got.SentVersion != 1 {
		t.Errorf("state %+v: want sent but not acknowledged", got)
	}
}

func TestPushRequestWrongTokenIsAuthExpired(t *testing.T) {
	t.Parallel()
	e := newActivityEnv(t, envOptions{tokens: channels.StaticCredential("not-the-token")})
	_, err := e.pushNew("b-401", e.mutation("a-1", 3, 1, withRate("80.00")))
	f := failureOf(t, err, models.ErrAuthExpired)
	if f.Status != 401 {
		t.Errorf("failure %+v, want status 401", f)
	}
	if strings.Contains(err.Error(), "not-the-token") {
		t.Errorf("error %q leaks the token", err)
	}
}

// rotatingToken hands out a stale token until it is refreshed.
type rotatingToken struct {
	mu        sync.Mutex
	token     string
	refreshed int
}

func (r *rotatingToken) Secret(context.Context) (string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.token, nil
}

func (r *rotatingToken) Refresh(context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.token = testToken
	r.refreshed++
	return nil
}

func TestPushRequestRefreshesCredentialWhenAsked(t *testing.T) {
	t.Parallel()
	tokens := &rotatingToken{token: "expired-token"}
	e := newActivityEnv(t, envOptions{tokens: tokens})
	chunk := e.preparedChunk("b-refresh", e.mutation("r-1", 3, 1, withRate("80.00")))

	_, err := e.push(models.PushInput{BatchID: "b-refresh", ChunkKey: chunk.Key})
	failureOf(t, err, models.ErrAuthExpired)
	if tokens.refreshed != 0 {
		t.Fatalf("refreshed %d times before being asked", tokens.refreshed)
	}

	res, err := e.push(models.PushInput{BatchID: "b-refresh", ChunkKey: chunk.Key, RefreshCredential: true})
	if err != nil {
		t.Fatalf("push after refresh: %v", err)
	}
	if tokens.refreshed != 1 || res.Committed != 1 {
		t.Errorf("refreshed %d times, committed %d; want 1 and 1", tokens.refreshed, res.Committed)
	}
}

func TestPushRequestChannelRejectionCarriesMessage(t *testing.T) {
	t.Parallel()
	e := newActivityEnv(t, envOptions{})
	from := e.today.AddDays(9)
	bad := models.ChannelRequest{Channel: testChannel, PropertyID: testProperty, Family: models.FamilyAvailability, Priority: 3,
		Lines: []models.ARILine{{RoomTypeCode: testRoom, RatePlanCode: testPlan, From: from, To: from.AddDays(-1),
			Values: models.Values{Inventory: ptr(3)}, Version: 1}},
		Refs: []models.MutationRef{{ID: "r-1", Version: 1, Line: 0, StayDate: from}}}
	key := e.saveChunk("b-400", bad)
	_, err := e.push(models.PushInput{BatchID: "b-400", ChunkKey: key})
	f := failureOf(t, err, models.ErrRejected)
	if f.Status != 400 || !strings.Contains(f.Message, "lines[0].to: before from") {
		t.Errorf("failure %+v, want 400 with the channel's message about lines[0].to", f)
	}
}

func TestPushRequestChannelQuotaExhausted(t *testing.T) {
	t.Parallel()
	e := newActivityEnv(t, envOptions{simChannel: func(c *models.ChannelConfig) { c.DailyQuota = 1 }})
	chunk := e.preparedChunk("b-quota", e.mutation("q-1", 3, 1, func(m *models.Mutation) {
		withRate("80.00")(m)
		m.Inventory = ptr(4)
	}))
	if _, err := e.push(models.PushInput{BatchID: "b-quota", ChunkKey: chunk.Key, Index: 0}); err != nil {
		t.Fatalf("first push spends the quota: %v", err)
	}
	_, err := e.push(models.PushInput{BatchID: "b-quota", ChunkKey: chunk.Key, Index: 1})
	f := failureOf(t, err, models.ErrQuotaExhausted)
	if f.Status != 400 || !strings.Contains(f.Message, models.ErrorQuotaExhausted) {
		t.Errorf("failure %+v, want 400 quota_exhausted", f)
	}
}

func TestPushRequestPartialCommitsAcceptedLines(t *testing.T) {
	t.Parallel()
	e := newActivityEnv(t, envOptions{sim: func(c *sim.Config) { c.Faults = sim.Faults{PartialRatio: 1} }})
	var ms []models.Mutation
	// Pairs of nights at one price: three lines of two refs each.
	for n := range 6 {
		ms = append(ms, e.mutation("pt-"+string(rune('a'+n)), 2+n, 4, withRate([]string{"100.00", "110.00", "120.00"}[n/2])))
	}
	chunk := e.preparedChunk("b-207", ms...)
	req := e.chunkRequests(chunk)[0]
	if len(req.Lines) != 3 || len(req.Refs) != 6 {
		t.Fatalf("request %+v, want 3 lines and 6 refs", req)
	}
	res, err := e.push(models.PushInput{BatchID: "b-207", ChunkKey: chunk.Key})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Failed) == 0 || len(res.Failed) == len(req.Lines) {
		t.Fatalf("failed lines %+v: want some but not all (change the simulator seed)", res.Failed)
	}
	failed := map[int]bool{}
	for _, f := range res.Failed {
		failed[f.Line] = true
		if f.Code == "" {
			t.Errorf("failed line %+v has no code", f)
		}
	}
	var wantRefs []models.MutationRef
	for _, ref := range req.Refs {
		if failed[ref.Line] {
			wantRefs = append(wantRefs, ref)
		}
	}
	if !slices.Equal(res.FailedRefs, wantRefs) {
		t.Errorf("failed refs %+v, want %+v", res.FailedRefs, wantRefs)
	}
	if res.Committed != len(req.Refs)-len(res.FailedRefs) || res.Superseded != 0 {
		t.Errorf("committed %d superseded %d, want %d committed", res.Committed, res.Superseded, len(req.Refs)-len(res.FailedRefs))
	}
	for _, ref := range req.Refs {
		cell := models.Cell{Channel: testChannel, PropertyID: testProperty, RoomTypeCode: testRoom, RatePlanCode: testPlan, StayDate: ref.StayDate}
		got, _ := e.cellState(cell, models.FamilyRates)
		if acked := got.Acked.Version > 0; acked == failed[ref.Line] {
			t.Errorf("night %s (line %d failed %v): acknowledged %v", ref.StayDate, ref.Line, failed[ref.Line], acked)
		}
	}
}

func TestPushRequestOlderThanAcknowledgedIsSupersededAtCommit(t *testing.T) {
	t.Parallel()
	e := newActivityEnv(t, envOptions{})
	ctx := context.Background()
	chunk := e.preparedChunk("b-race", e.mutation("old", 3, 5, withRate("80.00")), e.mutation("fresh", 4, 5, withRate("80.00")))
	req := e.chunkRequests(chunk)[0]
	// Another batch commits a newer version of the first night meanwhile.
	night := e.today.AddDays(3)
	newer := models.ChannelRequest{Channel: testChannel, PropertyID: testProperty, Family: models.FamilyRates, Priority: 3,
		Lines: []models.ARILine{{RoomTypeCode: testRoom, RatePlanCode: testPlan, From: night, To: night,
			Values: models.Values{Amount: decimalPtr("95.00"), Currency: "EUR"}, Version: 9}},
		Refs: []models.MutationRef{{ID: "newer", Version: 9, Line: 0, StayDate: night}}}
	if _, _, err := e.store.RecordAcknowledged(ctx, store.Ack{BatchID: "other", Request: newer, ConfirmationID: "conf-newer"}); err != nil {
		t.Fatal(err)
	}
	res, err := e.push(models.PushInput{BatchID: "b-race", ChunkKey: chunk.Key})
	if err != nil {
		t.Fatal(err)
	}
	if res.Superseded != 1 || res.Committed != len(req.Refs)-1 {
		t.Errorf("result %+v, want 1 superseded and %d committed", res, len(req.Refs)-1)
	}
	got, _ := e.cellState(models.Cell{Channel: testChannel, PropertyID: testProperty,
		RoomTypeCode: testRoom, RatePlanCode: testPlan, StayDate: night}, models.FamilyRates)
	if got.Acked.Version != 9 || got.ConfirmationID != "conf-newer" {
		t.Errorf("state %+v, want the newer acknowledged version 9 kept", got)
	}
}

func TestPushRequestRedisUnreachableFailsClosed(t *testing.T) {
	dead := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: 500 * time.Millisecond})
	t.Cleanup(func() { _ = dead.Close() })
	e := newActivityEnv(t, envOptions{limiterRDB: dead})
	_, err := e.pushNew("b-noredis", e.mutation("n-1", 3, 1, withRate("80.00")))
	if err == nil {
		t.Fatal("push succeeded without a limiter")
	}
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) && (appErr.NonRetryable() || slices.Contains(models.NonRetryableErrors, appErr.Type())) {
		t.Errorf("error %v is typed %q (non-retryable %v), want a plain retryable error", err, appErr.Type(), appErr.NonRetryable())
	}
	if n := e.simRequests(); n != 0 {
		t.Errorf("simulator saw %d requests without a token", n)
	}
}
