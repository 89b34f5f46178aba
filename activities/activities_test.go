package activities

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
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
	limiterRDB limiter.Client
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
	var limRDB limiter.Client = rdb
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
	Register(env, e.acts)
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

// result runs activity fn with in and decodes its result as a T. The activity's
// error is returned; a result that does not decode fails the test.
func result[T any](e *activityEnv, fn, in any) (T, error) {
	e.t.Helper()
	var out T
	v, err := e.exec(fn, in)
	if err != nil {
		return out, err
	}
	if err := v.Get(&out); err != nil {
		e.t.Fatal(err)
	}
	return out, nil
}

// mustResult is result failing the test on the activity's error, named by name.
func mustResult[T any](e *activityEnv, name string, fn, in any) T {
	e.t.Helper()
	out, err := result[T](e, fn, in)
	if err != nil {
		e.t.Fatalf("%s: %v", name, err)
	}
	return out
}

func (e *activityEnv) prepare(in models.BatchSyncInput) models.BatchPlan {
	e.t.Helper()
	return mustResult[models.BatchPlan](e, "PrepareBatch", e.acts.PrepareBatch, in)
}

func (e *activityEnv) push(in models.PushInput) (models.PushResult, error) {
	e.t.Helper()
	return result[models.PushResult](e, e.acts.PushRequest, in)
}

func (e *activityEnv) deadLetter(in models.DeadLetterInput) models.DeadLetterResult {
	e.t.Helper()
	return mustResult[models.DeadLetterResult](e, "RecordDeadLetter", e.acts.RecordDeadLetter, in)
}

// diff runs DiffChannel on the test channel over the next 30 nights, storing the
// repairs as batch batchID.
func (e *activityEnv) diff(batchID string) models.ChannelDrift {
	e.t.Helper()
	return mustResult[models.ChannelDrift](e, "DiffChannel", e.acts.DiffChannel,
		models.DiffInput{Channel: testChannel, From: e.today, To: e.today.AddDays(29), BatchID: batchID})
}

// pushEach prepares and pushes each of ms as a batch of its own (batch-0, batch-1,
// ...), failing the test on an error.
func (e *activityEnv) pushEach(batch string, ms ...models.Mutation) {
	e.t.Helper()
	for i, m := range ms {
		if _, err := e.pushNew(fmt.Sprintf("%s-%d", batch, i), m); err != nil {
			e.t.Fatal(err)
		}
	}
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

// pushNew prepares m as batch and pushes the batch's one request.
func (e *activityEnv) pushNew(batch string, m models.Mutation) (models.PushResult, error) {
	e.t.Helper()
	c := e.preparedChunk(batch, m)
	return e.push(models.PushInput{BatchID: batch, ChunkKey: c.Key})
}

// limiterStatus is the test channel's status in the limiter.
func (e *activityEnv) limiterStatus() limiter.Status {
	e.t.Helper()
	st, err := e.lim.Status(context.Background(), testChannel)
	if err != nil {
		e.t.Fatal(err)
	}
	return st
}

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

func failureOf(t *testing.T, err error, errType string) models.Failure {
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
	var f models.Failure
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
