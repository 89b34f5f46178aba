package activities

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"github.com/shopspring/decimal"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/paritysync/paritysync/activities/store"
	"github.com/paritysync/paritysync/activities/store/storetest"
	"github.com/paritysync/paritysync/channels"
	"github.com/paritysync/paritysync/dial/redistest"
	"github.com/paritysync/paritysync/limiter"
	"github.com/paritysync/paritysync/models"
	"github.com/paritysync/paritysync/otasim/sim"
)

const (
	testChannel  = "booking_com"
	testProperty = "prop_1a2b3c4d"
	testRoom     = "DLXKING"
	testPlan     = "BAR_FLEX"
	testToken    = "pstest-static-token"
)

// activityEnv is one test's world: a fresh key prefix on the real Redis, a limiter
// and a store under it, the simulator over HTTP, and the activities wired to them.
type activityEnv struct {
	t      *testing.T
	rdb    *redis.Client
	prefix string
	store  *store.Store
	lim    *limiter.Limiter
	sim    *sim.Simulator
	srv    *httptest.Server
	acts   *Activities
	now    time.Time
	today  models.Date
	chunks int
}

type envOptions struct {
	// slow keeps the default channel rates, so a bucket drains in a few calls;
	// otherwise rates are raised so no test waits for a token.
	slow bool
	// simChannel adjusts the simulator's copy of the channel only.
	simChannel func(*models.ChannelConfig)
	sim        func(*sim.Config)
	tokens     channels.Credential
	// limiterRDB replaces the limiter's Redis client.
	limiterRDB redis.Scripter
	chunkSize  int
	// pgTracer sees every statement the store sends.
	pgTracer pgx.QueryTracer
	// handler wraps the simulator's handler; client replaces the channel client's
	// HTTP client.
	handler func(http.Handler) http.Handler
	client  func(*httptest.Server) *http.Client
	// channel adjusts the test channel's configuration everywhere (limiter, client,
	// simulator); httpTimeout replaces the client's 5 s timeout, lease the
	// limiter's default lease.
	channel     func(*models.ChannelConfig)
	httpTimeout time.Duration
	lease       time.Duration
}

// testRedisClient connects to REDIS_URL (or the local default) and returns a fresh
// key prefix whose keys are deleted when the test ends.
func testRedisClient(t *testing.T) (*redis.Client, string) {
	t.Helper()
	return redistest.Client(t, "pstest")
}

func newActivityEnv(t *testing.T, o envOptions) *activityEnv {
	t.Helper()
	rdb, prefix := testRedisClient(t)
	chs := models.DefaultChannels()
	if !o.slow {
		for i := range chs {
			chs[i].RatePerMinute, chs[i].Burst = 6000, 600
		}
	}
	for i := range chs {
		if o.channel != nil && chs[i].Slug == testChannel {
			o.channel(&chs[i])
		}
	}
	simChs := slices.Clone(chs)
	for i := range simChs {
		if o.simChannel != nil && simChs[i].Slug == testChannel {
			o.simChannel(&simChs[i])
		}
	}
	sc := sim.Config{Channels: simChs, StaticTokens: []string{testToken}, Seed: 7}
	if o.sim != nil {
		o.sim(&sc)
	}
	s := sim.New(sc)
	var h http.Handler = s
	if o.handler != nil {
		h = o.handler(s)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(func() { s.Close(); srv.Close() })

	now := time.Now().UTC().Truncate(time.Hour)
	validator, err := models.NewValidator(chs, "", func() time.Time { return now })
	if err != nil {
		t.Fatal(err)
	}
	tokens := o.tokens
	if tokens == nil {
		tokens = channels.StaticCredential(testToken)
	}
	var limRDB redis.Scripter = rdb
	if o.limiterRDB != nil {
		limRDB = o.limiterRDB
	}
	st := openStore(t, storetest.Schema(t, "actstest"), o.pgTracer)
	if err := st.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	lim := limiter.New(limRDB, chs, limiter.Options{Prefix: prefix, Lease: o.lease})
	creds := channels.Credentials{}
	for _, c := range chs {
		creds[c.Slug] = tokens
	}
	hc := srv.Client()
	if o.client != nil {
		hc = o.client(srv)
	}
	timeout := 5 * time.Second
	if o.httpTimeout > 0 {
		timeout = o.httpTimeout
	}
	client := channels.New(hc, srv.URL, creds, chs, timeout)
	acts := &Activities{Limiter: lim, Client: client, Tokens: creds, Store: st,
		Channels: models.ChannelMap(chs), Validator: validator, ChunkSize: o.chunkSize,
		Now: func() time.Time { return now }}
	return &activityEnv{t: t, rdb: rdb, prefix: prefix, store: st, lim: lim, sim: s, srv: srv, acts: acts,
		now: now, today: models.DateOf(now)}
}

// openStore opens the store at url, its statements seen by tracer when not nil.
func openStore(t *testing.T, url string, tracer pgx.QueryTracer) *store.Store {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.Tracer = tracer
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return store.New(pool)
}

// exec runs one activity in the SDK's activity test environment, so activity.GetLogger
// and the error conversion are the ones a worker would use.
func (e *activityEnv) exec(fn any, in any) (converter.EncodedValue, error) {
	return e.execWith(fn, in, nil)
}

// execWith is exec with the activity environment set up by setup first.
func (e *activityEnv) execWith(fn any, in any, setup func(*testsuite.TestActivityEnvironment)) (converter.EncodedValue, error) {
	var suite testsuite.WorkflowTestSuite
	suite.SetLogger(log.NewStructuredLogger(slog.New(slog.NewTextHandler(testLogWriter{e.t}, nil))))
	env := suite.NewTestActivityEnvironment()
	env.RegisterActivity(e.acts)
	if setup != nil {
		setup(env)
	}
	return env.ExecuteActivity(fn, in)
}

// testLogWriter sends activity logs to the test's log, shown when it fails or with -v.
type testLogWriter struct{ t *testing.T }

func (w testLogWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

func (e *activityEnv) prepare(in models.BatchSyncInput) models.BatchPlan {
	e.t.Helper()
	v, err := e.exec(e.acts.PrepareBatch, in)
	if err != nil {
		e.t.Fatalf("PrepareBatch: %v", err)
	}
	var plan models.BatchPlan
	if err := v.Get(&plan); err != nil {
		e.t.Fatal(err)
	}
	return plan
}

func (e *activityEnv) push(in models.PushInput) (models.PushResult, error) {
	e.t.Helper()
	v, err := e.exec(e.acts.PushRequest, in)
	if err != nil {
		return models.PushResult{}, err
	}
	var res models.PushResult
	if err := v.Get(&res); err != nil {
		e.t.Fatal(err)
	}
	return res, nil
}

func (e *activityEnv) deadLetter(in models.DeadLetterInput) models.DeadLetterResult {
	e.t.Helper()
	v, err := e.exec(e.acts.RecordDeadLetter, in)
	if err != nil {
		e.t.Fatalf("RecordDeadLetter: %v", err)
	}
	var res models.DeadLetterResult
	if err := v.Get(&res); err != nil {
		e.t.Fatal(err)
	}
	return res
}

// saveChunk stores reqs as chunk n of batch and returns its key.
func (e *activityEnv) saveChunk(batch string, reqs ...models.ChannelRequest) string {
	e.t.Helper()
	c := models.Chunk{Channel: reqs[0].Channel, Priority: reqs[0].Priority, N: e.chunks, Requests: len(reqs)}
	e.chunks++
	key, err := e.store.SaveChunk(context.Background(), batch, c, reqs)
	if err != nil {
		e.t.Fatal(err)
	}
	return key
}

// chunkRequests reads every request of a stored chunk back, and checks the chunk
// holds no more than it says.
func (e *activityEnv) chunkRequests(c models.Chunk) []models.ChannelRequest {
	e.t.Helper()
	ctx := context.Background()
	var out []models.ChannelRequest
	for i := range c.Requests {
		r, err := e.store.Request(ctx, c.Key, i)
		if err != nil {
			e.t.Fatalf("request %d of %s: %v", i, c.Key, err)
		}
		out = append(out, r)
	}
	if _, err := e.store.Request(ctx, c.Key, c.Requests); !errors.Is(err, store.ErrBatchNotFound) {
		e.t.Fatalf("chunk %s holds more than its %d requests (err %v)", c.Key, c.Requests, err)
	}
	return out
}

func (e *activityEnv) simRequests() int { return e.sim.Stats()[testChannel].Requests }

// cellState reads what the store holds for one cell and family; ok is false when it
// holds nothing.
func (e *activityEnv) cellState(c models.Cell, f models.Family) (store.CellState, bool) {
	e.t.Helper()
	var got store.CellState
	ok := false
	if err := e.store.CellStates(context.Background(), c.Channel, c.StayDate, c.StayDate, func(cs store.CellState) error {
		if cs.Cell == c && cs.Family == f {
			got, ok = cs, true
		}
		return nil
	}); err != nil {
		e.t.Fatal(err)
	}
	return got, ok
}

// acknowledged records r as desired, sent and acknowledged by the channel, as a
// push of another batch would.
func (e *activityEnv) acknowledged(r models.ChannelRequest, conf string) {
	e.t.Helper()
	ctx := context.Background()
	var ms []models.Mutation
	for _, ref := range r.Refs {
		l := r.Lines[ref.Line]
		l.Version = ref.Version
		m := models.MutationOf(models.Cell{Channel: r.Channel, PropertyID: r.PropertyID, RoomTypeCode: l.RoomTypeCode,
			RatePlanCode: l.RatePlanCode, StayDate: ref.StayDate}, r.Family, l)
		m.ID = ref.ID
		ms = append(ms, m)
	}
	if _, err := e.store.RecordDesired(ctx, ms); err != nil {
		e.t.Fatal(err)
	}
	if err := e.store.RecordSent(ctx, r); err != nil {
		e.t.Fatal(err)
	}
	if _, _, err := e.store.RecordAcknowledged(ctx, store.Ack{BatchID: "earlier", Request: r, ConfirmationID: conf}); err != nil {
		e.t.Fatal(err)
	}
}

func (e *activityEnv) mutation(id string, night int, version int64, mod func(*models.Mutation)) models.Mutation {
	m := models.Mutation{ID: id, PropertyID: testProperty, RoomTypeCode: testRoom, RatePlanCode: testPlan,
		Channel: testChannel, StayDate: e.today.AddDays(night), Version: version}
	if mod != nil {
		mod(&m)
	}
	return m
}

func withRate(amount string) func(*models.Mutation) {
	return func(m *models.Mutation) { m.Amount, m.Currency = decimalPtr(amount), "EUR" }
}

func decimalPtr(s string) *decimal.Decimal {
	d := decimal.RequireFromString(s)
	return &d
}

func ptr[T any](v T) *T { return &v }

// failureOf asserts err is the typed, non-retryable error errType and returns its detail.
// deferralOf is the deferral of a push the limiter did not let go: a result, not
// a failed activity.
func deferralOf(t *testing.T, res models.PushResult, err error) models.Deferral {
	t.Helper()
	if err != nil {
		t.Fatalf("a deferred push is a result, not an error: %v", err)
	}
	if res.Deferred == nil {
		t.Fatalf("result %+v, want deferred", res)
	}
	return *res.Deferred
}

func failureOf(t *testing.T, err error, errType string) Failure {
	t.Helper()
	var appErr *temporal.ApplicationError
	if !errors.As(err, &appErr) {
		t.Fatalf("error %v is not an ApplicationError", err)
	}
	if appErr.Type() != errType {
		t.Fatalf("error type %q (%v), want %q", appErr.Type(), err, errType)
	}
	if !appErr.NonRetryable() {
		t.Fatalf("%s error is retryable", errType)
	}
	var f Failure
	if err := appErr.Details(&f); err != nil {
		t.Fatalf("decode failure detail: %v", err)
	}
	return f
}

// preparedChunk prepares ms as a batch and returns its only chunk.
func (e *activityEnv) preparedChunk(batch string, ms ...models.Mutation) models.Chunk {
	e.t.Helper()
	plan := e.prepare(models.BatchSyncInput{BatchID: batch, Mutations: ms})
	if len(plan.Chunks) != 1 {
		e.t.Fatalf("plan has %d chunks, want 1: %+v", len(plan.Chunks), plan)
	}
	return plan.Chunks[0]
}

func TestPrepareBatchRejectsWithFieldProblems(t *testing.T) {
	e := newActivityEnv(t, envOptions{})
	bad := e.mutation("mut-bad", 3, 1, func(m *models.Mutation) {
		m.PropertyID = "hotel-1"
		m.Amount, m.Currency = decimalPtr("99.999"), "EUR"
	})
	past := e.mutation("mut-past", -2, 1, func(m *models.Mutation) { m.Inventory = ptr(4) })
	good := e.mutation("mut-good", 3, 1, withRate("120.00"))
	plan := e.prepare(models.BatchSyncInput{BatchID: "b-reject", Mutations: []models.Mutation{bad, good, past}})

	if plan.Mutations != 3 {
		t.Errorf("plan.Mutations = %d, want 3", plan.Mutations)
	}
	if len(plan.Rejected) != 2 {
		t.Fatalf("rejected %+v, want mut-bad and mut-past", plan.Rejected)
	}
	byID := map[string]models.ValidationError{}
	for _, r := range plan.Rejected {
		if r.Channel != testChannel {
			t.Errorf("rejection %s on channel %q", r.MutationID, r.Channel)
		}
		byID[r.MutationID] = r.Problems
	}
	if p := byID["mut-bad"]; !p.Has("property_id", models.RulePropertyPattern) || !p.Has("amount", models.RuleAmountPlaces) {
		t.Errorf("mut-bad problems %v, want property_id pattern and amount places", p)
	}
	if p := byID["mut-past"]; !p.Has("stay_date", models.RuleNotPast) {
		t.Errorf("mut-past problems %v, want stay_date not past", p)
	}
	if len(plan.Decided) != 1 || plan.Decided[0].Rejected != 2 || plan.Decided[0].Total != 3 {
		t.Errorf("decided %+v, want %s total 3 rejected 2", plan.Decided, testChannel)
	}
	if len(plan.Chunks) != 1 || plan.Chunks[0].Updates != 1 {
		t.Fatalf("chunks %+v, want one chunk with the valid update", plan.Chunks)
	}
	reqs := e.chunkRequests(plan.Chunks[0])
	if len(reqs[0].Refs) != 1 || reqs[0].Refs[0].ID != "mut-good" {
		t.Errorf("chunk refs %+v, want only mut-good", reqs[0].Refs)
	}
}

func TestPrepareBatchCoalescesIntoOrderedChunks(t *testing.T) {
	e := newActivityEnv(t, envOptions{chunkSize: 2})
	var ms []models.Mutation
	// Four consecutive nights at one price and version: one line.
	for n := range 4 {
		ms = append(ms, e.mutation("rate-"+string(rune('a'+n)), 10+n, 2, withRate("150.00")))
	}
	// Bulk full-sync rates for three other properties: three requests, two chunks.
	for i, p := range []string{"prop_00000001", "prop_00000002", "prop_00000003"} {
		ms = append(ms, e.mutation("bulk-"+p, 20, 1, func(m *models.Mutation) {
			m.PropertyID, m.FullSync = p, true
			m.Inventory = ptr(5 + i)
		}))
	}
	// A stop-sell is urgent, on another channel too.
	ms = append(ms, e.mutation("stop", 5, 3, func(m *models.Mutation) { m.StopSell = ptr(true) }))
	ms = append(ms, e.mutation("stop-agoda", 5, 3, func(m *models.Mutation) {
		m.Channel, m.StopSell = "agoda", ptr(true)
	}))
	plan := e.prepare(models.BatchSyncInput{BatchID: "b-order", Mutations: ms})

	type want struct {
		channel           string
		priority, n       int
		requests, updates int
	}
	wants := []want{
		{"agoda", 1, 0, 1, 1},
		{testChannel, 1, 0, 1, 1},
		{testChannel, 3, 0, 1, 4},
		{testChannel, 5, 0, 2, 2},
		{testChannel, 5, 1, 1, 1},
	}
	if len(plan.Chunks) != len(wants) {
		t.Fatalf("chunks %+v, want %d", plan.Chunks, len(wants))
	}
	for i, w := range wants {
		c := plan.Chunks[i]
		if c.Channel != w.channel || c.Priority != w.priority || c.N != w.n || c.Requests != w.requests || c.Updates != w.updates {
			t.Errorf("chunk %d = %+v, want %+v", i, c, w)
		}
		reqs := e.chunkRequests(c)
		updates := 0
		for _, r := range reqs {
			if r.Channel != c.Channel || r.Priority != c.Priority {
				t.Errorf("chunk %s holds a %s p%d request", c.Key, r.Channel, r.Priority)
			}
			updates += len(r.Refs)
		}
		if updates != c.Updates {
			t.Errorf("chunk %s: Updates %d, stored refs %d", c.Key, c.Updates, updates)
		}
	}
	rates := e.chunkRequests(plan.Chunks[2])[0]
	if len(rates.Lines) != 1 || rates.Lines[0].From != e.today.AddDays(10) || rates.Lines[0].To != e.today.AddDays(13) {
		t.Errorf("rates request lines %+v, want one line over nights 10..13", rates.Lines)
	}
}

func TestPrepareBatchSupersededByLedgerIsInNoChunk(t *testing.T) {
	e := newActivityEnv(t, envOptions{})
	night := e.today.AddDays(7)
	committed := models.ChannelRequest{Channel: testChannel, PropertyID: testProperty, Family: models.FamilyRates, Priority: 3,
		Lines: []models.ARILine{{RoomTypeCode: testRoom, RatePlanCode: testPlan, From: night, To: night,
			Values: models.Values{Amount: decimalPtr("200.00"), Currency: "EUR"}, Version: 10}},
		Refs: []models.MutationRef{{ID: "earlier", Version: 10, Line: 0, StayDate: night}}}
	e.acknowledged(committed, "conf-1")
	// Older rates (stale) plus inventory the ledger has not seen (fresh).
	old := e.mutation("old", 7, 5, func(m *models.Mutation) {
		withRate("180.00")(m)
		m.Inventory = ptr(3)
	})
	// Equal version is not older: a re-send goes out.
	same := e.mutation("same", 7, 10, func(m *models.Mutation) {
		m.RoomTypeCode = "STDTWIN"
		withRate("90.00")(m)
	})
	plan := e.prepare(models.BatchSyncInput{BatchID: "b-stale", Mutations: []models.Mutation{old, same}})

	if len(plan.Decided) != 1 || plan.Decided[0].Superseded != 1 || plan.Decided[0].Total != 3 {
		t.Fatalf("decided %+v, want total 3 superseded 1", plan.Decided)
	}
	var fams []string
	for _, c := range plan.Chunks {
		for _, r := range e.chunkRequests(c) {
			for _, ref := range r.Refs {
				fams = append(fams, ref.ID+"/"+string(r.Family))
			}
		}
	}
	slices.Sort(fams)
	if want := []string{"old/availability", "same/rates"}; !slices.Equal(fams, want) {
		t.Errorf("chunked updates %v, want %v (old/rates superseded)", fams, want)
	}
}

func TestPrepareBatchByReference(t *testing.T) {
	e := newActivityEnv(t, envOptions{})
	ms := []models.Mutation{
		e.mutation("ref-1", 1, 1, withRate("100.00")),
		e.mutation("ref-2", 2, 1, func(m *models.Mutation) { m.Inventory = ptr(7) }),
	}
	key, err := e.store.SaveBatch(context.Background(), "b-ref", ms)
	if err != nil {
		t.Fatal(err)
	}
	plan := e.prepare(models.BatchSyncInput{BatchID: "b-ref", PayloadKey: key})
	if plan.Mutations != 2 || len(plan.Chunks) != 1 || plan.Chunks[0].Requests != 2 {
		t.Fatalf("plan %+v, want 2 mutations in one chunk of a rates and an availability request", plan)
	}
	var ids []string
	for _, c := range plan.Chunks {
		for _, r := range e.chunkRequests(c) {
			for _, ref := range r.Refs {
				ids = append(ids, ref.ID)
			}
		}
	}
	slices.Sort(ids)
	if !slices.Equal(ids, []string{"ref-1", "ref-2"}) {
		t.Errorf("chunked mutations %v, want ref-1 and ref-2", ids)
	}

	_, err = e.exec(e.acts.PrepareBatch, models.BatchSyncInput{BatchID: "b-gone", PayloadKey: key + "-missing"})
	if f := failureOf(t, err, ErrPayloadLost); !strings.Contains(f.Message, store.ErrBatchNotFound.Error()) {
		t.Errorf("missing payload: %+v, want %v", f, store.ErrBatchNotFound)
	}
}

func TestPrepareBatchAccountsForEveryUpdateOnce(t *testing.T) {
	e := newActivityEnv(t, envOptions{chunkSize: 3})
	night := e.today.AddDays(30)
	committed := models.ChannelRequest{Channel: "expedia", PropertyID: testProperty, Family: models.FamilyAvailability, Priority: 3,
		Lines: []models.ARILine{{RoomTypeCode: testRoom, RatePlanCode: testPlan, From: night, To: night, Values: models.Values{Inventory: ptr(1)}, Version: 50}},
		Refs:  []models.MutationRef{{ID: "earlier", Version: 50, Line: 0, StayDate: night}}}
	e.acknowledged(committed, "conf-x")
	var ms []models.Mutation
	for i, ch := range []string{testChannel, "expedia", "agoda"} {
		for n := range 12 {
			ms = append(ms, e.mutation(ch+"-"+string(rune('a'+n)), 20+n, int64(10+i), func(m *models.Mutation) {
				m.Channel = ch
				m.Amount, m.Currency = ptr(decimal.NewFromInt(int64(100+n%3))), "USD"
				if n%2 == 0 {
					m.Inventory = ptr(n)
				}
				if n%4 == 0 {
					m.MinLOS, m.MaxLOS = ptr(2), ptr(7)
				}
				m.Priority = 1 + n%5
			}))
		}
	}
	// Losers within the batch: an older version of a cell that is also sent newer.
	ms = append(ms, e.mutation("agoda-old", 20, 1, func(m *models.Mutation) {
		m.Channel, m.Amount, m.Currency = "agoda", decimalPtr("1.00"), "USD"
	}))
	// Invalid ones.
	ms = append(ms, e.mutation("no-values", 20, 1, nil))
	ms = append(ms, e.mutation("bad-channel", 20, 1, func(m *models.Mutation) { m.Channel, m.Inventory = "orbitz", ptr(1) }))
	plan := e.prepare(models.BatchSyncInput{BatchID: "b-sum", Mutations: ms})

	var total, rejected, superseded, chunked int
	for _, c := range plan.Decided {
		total += c.Total
		rejected += c.Rejected
		superseded += c.Superseded
	}
	seen := map[string]bool{}
	for _, c := range plan.Chunks {
		chunked += c.Updates
		for _, r := range e.chunkRequests(c) {
			for _, ref := range r.Refs {
				k := ref.ID + "/" + string(r.Family)
				if seen[k] {
					t.Errorf("update %s is in more than one request", k)
				}
				seen[k] = true
			}
		}
	}
	if rejected != 2 {
		t.Errorf("rejected %d, want 2", rejected)
	}
	// expedia night 30 availability lost to the ledger; agoda-old lost in the batch.
	if superseded != 2 {
		t.Errorf("superseded %d, want 2", superseded)
	}
	if total != rejected+superseded+chunked {
		t.Errorf("decided total %d != rejected %d + superseded %d + chunked %d", total, rejected, superseded, chunked)
	}
	var want int
	for _, m := range ms {
		if len(e.acts.Validator.Validate(m)) > 0 {
			want++
		} else {
			want += len(m.Families())
		}
	}
	if total != want {
		t.Errorf("decided total %d, want %d: one per (valid mutation, family) plus one per rejection", total, want)
	}
	if len(seen) != chunked {
		t.Errorf("%d distinct chunked updates, chunks say %d", len(seen), chunked)
	}
	for i := 1; i < len(plan.Chunks); i++ {
		if plan.Chunks[i].Priority < plan.Chunks[i-1].Priority {
			t.Errorf("chunk %d (p%d) after a p%d chunk", i, plan.Chunks[i].Priority, plan.Chunks[i-1].Priority)
		}
	}
}

func TestPushRequestCommittedRecordsAcknowledgedStateAndChannel(t *testing.T) {
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
	if time.Duration(f.Wait) <= DefaultShortWait || !f.Held || f.Paused != "" {
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
	st, err := e.lim.Status(context.Background(), testChannel)
	if err != nil {
		t.Fatal(err)
	}
	if st.InWindow != 2 {
		t.Fatalf("window holds %d slots, want 2", st.InWindow)
	}
}

func TestPushRequestPausedChannelMakesNoCall(t *testing.T) {
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
	e := newActivityEnv(t, envOptions{sim: func(c *sim.Config) { c.Faults = sim.Faults{StormSeconds: 30} }})
	chunk := e.preparedChunk("b-429", e.mutation("t-1", 3, 1, withRate("80.00")))
	_, err := e.push(models.PushInput{BatchID: "b-429", ChunkKey: chunk.Key})
	f := failureOf(t, err, ErrThrottled)
	if !f.ServerWait || f.Wait <= 0 || f.Wait > 30*time.Second || f.Status != 429 {
		t.Errorf("failure %+v, want status 429 and the server's wait of at most 30 s", f)
	}
	st, err := e.lim.Status(context.Background(), testChannel)
	if err != nil {
		t.Fatal(err)
	}
	if st.PausedFor <= 0 || st.PausedFor > 30*time.Second {
		t.Errorf("limiter paused for %s, want the channel back-off of up to 30 s", st.PausedFor)
	}
	if n := e.simRequests(); n != 1 {
		t.Errorf("simulator saw %d requests, want 1", n)
	}
}

func TestPushRequestServerErrorIsTransient(t *testing.T) {
	e := newActivityEnv(t, envOptions{sim: func(c *sim.Config) { c.Faults = sim.Faults{ErrorRatio: 1} }})
	chunk := e.preparedChunk("b-5xx", e.mutation("s-1", 3, 1, withRate("80.00")))
	_, err := e.push(models.PushInput{BatchID: "b-5xx", ChunkKey: chunk.Key})
	f := failureOf(t, err, ErrTransient)
	if f.Status < 500 || f.Status > 599 {
		t.Errorf("failure %+v, want a 5xx status", f)
	}
	if got, _ := e.cellState(e.mutation("s-1", 3, 1, nil).Cell(), models.FamilyRates); got.Acked.Version != 0 || got.SentVersion != 1 {
		t.Errorf("state %+v: want sent but not acknowledged", got)
	}
}

func TestPushRequestWrongTokenIsAuthExpired(t *testing.T) {
	e := newActivityEnv(t, envOptions{tokens: channels.StaticCredential("not-the-token")})
	chunk := e.preparedChunk("b-401", e.mutation("a-1", 3, 1, withRate("80.00")))
	_, err := e.push(models.PushInput{BatchID: "b-401", ChunkKey: chunk.Key})
	f := failureOf(t, err, ErrAuthExpired)
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
	tokens := &rotatingToken{token: "expired-token"}
	e := newActivityEnv(t, envOptions{tokens: tokens})
	chunk := e.preparedChunk("b-refresh", e.mutation("r-1", 3, 1, withRate("80.00")))

	_, err := e.push(models.PushInput{BatchID: "b-refresh", ChunkKey: chunk.Key})
	failureOf(t, err, ErrAuthExpired)
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
	e := newActivityEnv(t, envOptions{})
	from := e.today.AddDays(9)
	bad := models.ChannelRequest{Channel: testChannel, PropertyID: testProperty, Family: models.FamilyAvailability, Priority: 3,
		Lines: []models.ARILine{{RoomTypeCode: testRoom, RatePlanCode: testPlan, From: from, To: from.AddDays(-1),
			Values: models.Values{Inventory: ptr(3)}, Version: 1}},
		Refs: []models.MutationRef{{ID: "r-1", Version: 1, Line: 0, StayDate: from}}}
	key := e.saveChunk("b-400", bad)
	_, err := e.push(models.PushInput{BatchID: "b-400", ChunkKey: key})
	f := failureOf(t, err, ErrRejected)
	if f.Status != 400 || !strings.Contains(f.Message, "lines[0].to: before from") {
		t.Errorf("failure %+v, want 400 with the channel's message about lines[0].to", f)
	}
}

func TestPushRequestChannelQuotaExhausted(t *testing.T) {
	e := newActivityEnv(t, envOptions{simChannel: func(c *models.ChannelConfig) { c.DailyQuota = 1 }})
	chunk := e.preparedChunk("b-quota", e.mutation("q-1", 3, 1, func(m *models.Mutation) {
		withRate("80.00")(m)
		m.Inventory = ptr(4)
	}))
	if _, err := e.push(models.PushInput{BatchID: "b-quota", ChunkKey: chunk.Key, Index: 0}); err != nil {
		t.Fatalf("first push spends the quota: %v", err)
	}
	_, err := e.push(models.PushInput{BatchID: "b-quota", ChunkKey: chunk.Key, Index: 1})
	f := failureOf(t, err, ErrQuotaExhausted)
	if f.Status != 400 || !strings.Contains(f.Message, models.ErrorQuotaExhausted) {
		t.Errorf("failure %+v, want 400 quota_exhausted", f)
	}
}

func TestPushRequestPartialCommitsAcceptedLines(t *testing.T) {
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
	chunk := e.preparedChunk("b-noredis", e.mutation("n-1", 3, 1, withRate("80.00")))
	_, err := e.push(models.PushInput{BatchID: "b-noredis", ChunkKey: chunk.Key})
	if err == nil {
		t.Fatal("push succeeded without a limiter")
	}
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) && (appErr.NonRetryable() || slices.Contains(NonRetryableErrors, appErr.Type())) {
		t.Errorf("error %v is typed %q (non-retryable %v), want a plain retryable error", err, appErr.Type(), appErr.NonRetryable())
	}
	if n := e.simRequests(); n != 0 {
		t.Errorf("simulator saw %d requests without a token", n)
	}
}

// deadLetterRequest is a three-line availability request with two refs on its
// middle line.
func (e *activityEnv) deadLetterRequest(property string) models.ChannelRequest {
	r := models.ChannelRequest{Channel: testChannel, PropertyID: property, Family: models.FamilyAvailability, Priority: 2}
	d := e.today.AddDays(12)
	r.Lines = []models.ARILine{
		{RoomTypeCode: testRoom, RatePlanCode: testPlan, From: d, To: d, Values: models.Values{Inventory: ptr(1)}, Version: 3},
		{RoomTypeCode: testRoom, RatePlanCode: testPlan, From: d.AddDays(1), To: d.AddDays(2), Values: models.Values{Inventory: ptr(2)}, Version: 3},
		{RoomTypeCode: testRoom, RatePlanCode: testPlan, From: d.AddDays(3), To: d.AddDays(3), Values: models.Values{Inventory: ptr(3)}, Version: 3},
	}
	r.Refs = []models.MutationRef{
		{ID: "dl-0", Version: 3, Line: 0, StayDate: d},
		{ID: "dl-1", Version: 3, Line: 1, StayDate: d.AddDays(1)},
		{ID: "dl-2", Version: 3, Line: 1, StayDate: d.AddDays(2)},
		{ID: "dl-3", Version: 3, Line: 2, StayDate: d.AddDays(3)},
	}
	return r
}

func (e *activityEnv) deadLetters() []store.DeadLetter {
	e.t.Helper()
	ds, err := e.store.DeadLetters(context.Background(), store.DeadLetterFilter{Channel: testChannel})
	if err != nil {
		e.t.Fatal(err)
	}
	return ds
}

func TestRecordDeadLetterParksRequest(t *testing.T) {
	e := newActivityEnv(t, envOptions{})
	req := e.deadLetterRequest(testProperty)
	key := e.saveChunk("b-dlq", req)
	res := e.deadLetter(models.DeadLetterInput{BatchID: "b-dlq", ChunkKey: key, Index: 0,
		Reason: models.ReasonRejected, Status: 400, Message: "lines[0].inventory: nope"})
	if res.Updates != 4 || res.EntryID == "" {
		t.Errorf("result %+v, want 4 updates and an entry id", res)
	}
	ds := e.deadLetters()
	if len(ds) != 1 {
		t.Fatalf("%d dead letters, want 1", len(ds))
	}
	d := ds[0]
	if fmt.Sprint(d.ID) != res.EntryID || d.BatchID != "b-dlq" || d.Reason != models.ReasonRejected || d.Status != 400 ||
		d.Message != "lines[0].inventory: nope" || d.PropertyID != testProperty ||
		!slices.Equal(d.MutationIDs, []string{"dl-0", "dl-1", "dl-2", "dl-3"}) || len(d.StayDates) != 4 {
		t.Errorf("dead letter %+v", d)
	}
	if d.Request.IdempotencyKey() != req.IdempotencyKey() || !slices.Equal(d.Request.Refs, req.Refs) {
		t.Errorf("parked request %+v, want %+v", d.Request, req)
	}
}

func TestRecordDeadLetterOnlyListedLines(t *testing.T) {
	e := newActivityEnv(t, envOptions{})
	req := e.deadLetterRequest(testProperty)
	key := e.saveChunk("b-lines", req)
	res := e.deadLetter(models.DeadLetterInput{BatchID: "b-lines", ChunkKey: key, Index: 0, Lines: []int{1, 2},
		Reason: models.ReasonLineFailed, Status: 207, Message: "line_rejected"})
	if res.Updates != 3 {
		t.Errorf("updates %d, want 3 (two refs on line 1, one on line 2)", res.Updates)
	}
	ds := e.deadLetters()
	if len(ds) != 1 {
		t.Fatalf("%d dead letters, want 1", len(ds))
	}
	got := ds[0].Request
	if len(got.Lines) != 2 || got.Lines[0].From != req.Lines[1].From || got.Lines[1].From != req.Lines[2].From {
		t.Fatalf("parked lines %+v, want lines 1 and 2", got.Lines)
	}
	var ids []string
	for _, ref := range got.Refs {
		ids = append(ids, ref.ID)
		line := got.Lines[ref.Line]
		if ref.StayDate.Before(line.From) || ref.StayDate.After(line.To) {
			t.Errorf("ref %s (night %s) points at line %d over %s..%s", ref.ID, ref.StayDate, ref.Line, line.From, line.To)
		}
	}
	if !slices.Equal(ids, []string{"dl-1", "dl-2", "dl-3"}) {
		t.Errorf("parked refs %v, want dl-1 dl-2 dl-3", ids)
	}
}

func TestRecordDeadLetterRetryParksOnce(t *testing.T) {
	e := newActivityEnv(t, envOptions{})
	key := e.saveChunk("b-retry", e.deadLetterRequest(testProperty))
	in := models.DeadLetterInput{BatchID: "b-retry", ChunkKey: key, Index: 0, Lines: []int{0},
		Reason: models.ReasonLineFailed, Status: 207}
	first := e.deadLetter(in)
	second := e.deadLetter(in)
	if first.EntryID == "" || second.EntryID != first.EntryID {
		t.Errorf("entry ids %q then %q, want the same entry", first.EntryID, second.EntryID)
	}
	if second.Updates != first.Updates {
		t.Errorf("retry reports %d updates, first call %d", second.Updates, first.Updates)
	}
	if n := len(e.deadLetters()); n != 1 {
		t.Errorf("%d dead letters after a retried call, want 1", n)
	}
}

func TestRecordDeadLetterWholeChunk(t *testing.T) {
	e := newActivityEnv(t, envOptions{})
	props := []string{"prop_00000001", "prop_00000002", "prop_00000003"}
	var reqs []models.ChannelRequest
	for _, p := range props {
		reqs = append(reqs, e.deadLetterRequest(p))
	}
	key := e.saveChunk("b-whole", reqs...)
	res := e.deadLetter(models.DeadLetterInput{BatchID: "b-whole", ChunkKey: key, Index: models.WholeChunk,
		Reason: models.ReasonChildFailed})
	if res.Updates != 12 {
		t.Errorf("updates %d, want 12", res.Updates)
	}
	ds := e.deadLetters()
	var got []string
	for _, d := range ds {
		got = append(got, d.PropertyID)
		if d.Reason != models.ReasonChildFailed || len(d.Request.Refs) != 4 {
			t.Errorf("dead letter %+v", d)
		}
	}
	if !slices.Equal(got, props) {
		t.Errorf("parked properties %v, want %v", got, props)
	}
}
