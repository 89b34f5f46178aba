package main

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"
	"github.com/shopspring/decimal"
	"github.com/stretchr/testify/require"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.uber.org/fx"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/paritysync/paritysync/activities"
	"github.com/paritysync/paritysync/activities/store/storetest"
	"github.com/paritysync/paritysync/config"
	"github.com/paritysync/paritysync/dial/devtest"
	"github.com/paritysync/paritysync/dial/redistest"
	"github.com/paritysync/paritysync/limiter"
	"github.com/paritysync/paritysync/models"
	"github.com/paritysync/paritysync/ops"
	"github.com/paritysync/paritysync/otasim/sample"
	"github.com/paritysync/paritysync/otasim/sim"
	"github.com/paritysync/paritysync/workflows"
)

// The end-to-end test runs the whole path on real parts: a Temporal dev server (the
// CLI binary `make test` builds into .bin/), the real Redis at REDIS_URL, the
// simulator over real HTTP and this worker's fx application.

// temporalCLI finds the Temporal CLI binary that `make test` builds.
func temporalCLI(t *testing.T) string {
	t.Helper()
	path, err := devtest.CLI()
	if err != nil {
		t.Fatalf("no Temporal CLI at %s (make test builds it into .bin/; or set TEMPORAL_CLI): %v", path, err)
	}
	return path
}

// TestMain stops the package's one dev server (devtest) after the tests.
func TestMain(m *testing.M) { devtest.Main(m) }

// startDevServer is the test's namespace on the package's dev server (devtest: the
// new matcher with one partition and paritysync's search attributes, as production
// should run); it skips under -short.
func startDevServer(t *testing.T) *devtest.Env {
	t.Helper()
	return devtest.Start(t)
}

// e2eStack is a dev server, a simulator and a running worker sharing a key prefix.
type e2eStack struct {
	// acts and lim are the first worker's, for tests that call them directly.
	acts   *activities.Activities
	lim    *limiter.Limiter
	env    map[string]string
	tc     client.Client
	sim    *sim.Simulator
	rdb    *redis.Client
	prefix string
	queue  string
	// metrics is the worker's /metrics registry.
	metrics *prometheus.Registry
	app     *fx.App
	apps    []*fx.App
}

func (s *e2eStack) getenv(k string) string { return s.env[k] }

// startStack starts a simulator and a worker on srv; env changes the worker's
// environment before it starts.
func startStack(t *testing.T, srv *devtest.Env, limits map[string]int, env ...func(map[string]string)) *e2eStack {
	t.Helper()
	chs := map[string]stackChannel{}
	for slug, perMinute := range limits {
		chs[slug] = stackChannel{PerMinute: perMinute, Burst: max(2, perMinute/10), MaxLines: 4}
	}
	return startStackWith(t, srv, stackOptions{Channels: chs, Edit: env})
}

// startShortStack is startStack at the short test window: each channel's limit
// counts per testWindow instead of per minute.
func startShortStack(t *testing.T, srv *devtest.Env, limits map[string]int, env ...func(map[string]string)) *e2eStack {
	t.Helper()
	chs := map[string]stackChannel{}
	for slug, perWindow := range limits {
		chs[slug] = stackChannel{PerMinute: perWindow, Burst: max(2, perWindow/10), MaxLines: 4}
	}
	return startStackWith(t, srv, stackOptions{Channels: chs, Edit: env, Window: testWindow})
}

// stackChannel overrides one channel's limits for a stack.
type stackChannel struct {
	PerMinute, Burst, MaxLines int
}

// stackOptions shapes a stack: channel limits, how many workers poll its task queue
// and extra worker environment.
type stackOptions struct {
	Channels map[string]stackChannel
	Workers  int
	Env      map[string]string
	// Window, when set, is every channel's window (the worker's and the
	// simulator's): a test whose assertions are relative to the window (window use,
	// most in any window, makespan against the minimum) runs at a short one, its
	// limits then counted per Window instead of per minute.
	Window time.Duration
	// Edit changes the worker environment last.
	Edit []func(map[string]string)
	// Sim changes the simulator's configuration (faults, clock) before it starts;
	// Serve, when set, wraps its handler (to see every exchange).
	Sim   func(*sim.Config)
	Serve func(http.Handler) http.Handler
}

func startStackWith(t *testing.T, srv *devtest.Env, o stackOptions) *e2eStack {
	t.Helper()
	redisURL := redistest.Reachable(t)
	opt, err := redis.ParseURL(redisURL)
	require.NoError(t, err)
	rdb := redis.NewClient(opt)
	require.NoError(t, rdb.Ping(context.Background()).Err(), "Redis at %s", redisURL)

	id := uuid.NewString()[:8]
	s := &e2eStack{rdb: rdb, prefix: "paritysync-e2e-" + id + ":", queue: "paritysync-e2e-" + id}
	s.env = map[string]string{
		"REDIS_URL":               redisURL,
		"TEMPORAL_ADDRESS":        srv.FrontendHostPort(),
		"TEMPORAL_NAMESPACE":      srv.Namespace(),
		"PARITYSYNC_TASK_QUEUE":   s.queue,
		"PARITYSYNC_KEY_PREFIX":   s.prefix,
		"PARITYSYNC_TOKEN":        "e2e-token",
		"PARITYSYNC_METRICS_ADDR": "127.0.0.1:0",
		"PARITYSYNC_CHUNK_SIZE":   "5",
		// A schema of its own on the local PostgreSQL, dropped at the end.
		"PARITYSYNC_DATABASE_URL": storetest.Schema(t, "e2e"),
	}
	for slug, c := range o.Channels {
		up := strings.ToUpper(slug)
		s.env["PARITYSYNC_CHANNEL_"+up+"_RATE_PER_MINUTE"] = fmt.Sprint(c.PerMinute)
		s.env["PARITYSYNC_CHANNEL_"+up+"_BURST"] = fmt.Sprint(c.Burst)
		s.env["PARITYSYNC_CHANNEL_"+up+"_MAX_LINES_PER_REQUEST"] = fmt.Sprint(c.MaxLines)
	}
	for k, v := range o.Env {
		s.env[k] = v
	}
	if o.Window > 0 {
		s.env["PARITYSYNC_CHANNELS_FILE"] = windowFile(t, o.Window, o.Channels)
	}
	for _, f := range o.Edit {
		f(s.env)
	}
	chs, err := config.LoadChannels(s.env["PARITYSYNC_CHANNELS_FILE"], s.getenv)
	require.NoError(t, err)
	// The simulator enforces exactly the limits (and windows) the worker is
	// configured with.
	simCfg := sim.Config{Channels: chs, StaticTokens: []string{"e2e-token"}}
	if o.Sim != nil {
		o.Sim(&simCfg)
	}
	s.sim = sim.New(simCfg)
	var h http.Handler = s.sim
	if o.Serve != nil {
		h = o.Serve(h)
	}
	httpSrv := httptest.NewServer(h)
	s.env["PARITYSYNC_CHANNEL_URL"] = httpSrv.URL

	for range max(1, o.Workers) {
		s.startWorker(t)
	}
	s.tc = srv.Client()

	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for _, app := range s.apps {
			_ = app.Stop(ctx)
		}
		httpSrv.Close()
		s.sim.Close()
		iter := rdb.Scan(ctx, 0, s.prefix+"*", 1000).Iterator()
		for iter.Next(ctx) {
			rdb.Del(ctx, iter.Val())
		}
		_ = rdb.Close()
	})
	return s
}

// testWindow is the short window of the tests whose assertions are relative to it:
// a tenth of the real 60 s, long against the limiter's 500 ms lateness margin.
const testWindow = 6 * time.Second

// windowFile is a channels file that gives every channel of chs the window w (a
// window is set only per channel, in the file, never by the environment).
func windowFile(t *testing.T, w time.Duration, chs map[string]stackChannel) string {
	t.Helper()
	var b strings.Builder
	b.WriteString("channels:\n")
	for _, slug := range slices.Sorted(maps.Keys(chs)) {
		fmt.Fprintf(&b, "  - slug: %s\n    window: %s\n", slug, w)
	}
	path := filepath.Join(t.TempDir(), "channels.yaml")
	require.NoError(t, os.WriteFile(path, []byte(b.String()), 0o600))
	return path
}

// startWorker starts one more worker on the stack's task queue (again, after a test
// stopped one); s.app is the newest. The first one's activities, limiter and
// metrics registry are the stack's, for tests that call them directly.
func (s *e2eStack) startWorker(t *testing.T) {
	t.Helper()
	var extra []fx.Option
	if len(s.apps) == 0 {
		extra = append(extra, fx.Populate(&s.acts, &s.lim, &s.metrics))
	}
	s.app = newApp(s.getenv, extra...)
	s.apps = append(s.apps, s.app)
	require.NoError(t, s.app.Err())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, s.app.Start(ctx))
}

func (s *e2eStack) runBatch(t *testing.T, batchID string, ms []models.Mutation) models.BatchStatus {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	in := models.BatchSyncInput{BatchID: batchID, Mutations: ms, Retry: models.DefaultRetryPolicy()}
	run, err := s.tc.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID: models.BatchWorkflowID(batchID), TaskQueue: s.queue,
		TypedSearchAttributes: temporal.NewSearchAttributes(
			temporal.NewSearchAttributeKeyKeyword(models.SearchAttrBatchID).ValueSet(batchID)),
	}, workflows.BatchSync, in)
	require.NoError(t, err)
	var st models.BatchStatus
	require.NoError(t, run.Get(ctx, &st), "batch %s", batchID)
	return st
}

func TestEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: needs a Temporal dev server")
	}
	t.Parallel() // it waits on its channels' windows; its stack shares nothing
	srv := startDevServer(t)
	// Tight limits: the batch needs more than a window of each channel's budget. The
	// assertions are relative to the window (most in any window, no 429), so a short
	// one.
	s := startShortStack(t, srv, map[string]int{"booking_com": 30, "expedia": 20, "agoda": 40})
	today := models.DateOf(time.Now())

	ms := sample.Batch(300, today, time.Now().Unix(), 1)
	invalid := 0
	v, err := models.NewValidator(models.DefaultChannels(), "", time.Now)
	require.NoError(t, err)
	for _, m := range ms {
		if len(v.Validate(m)) > 0 {
			invalid++
		}
	}
	require.Positive(t, invalid, "the sample carries invalid rows")

	t.Run("tight limits: everything committed or reported, no 429", func(t *testing.T) {
		st := s.runBatch(t, "e2e-"+uuid.NewString()[:8], ms)
		total := st.Totals()
		t.Logf("batch: %+v", total)
		require.True(t, st.Done)
		require.Equal(t, 300, st.Mutations)
		for _, c := range st.Channels {
			require.Equal(t, c.Total, c.Done(), "channel %s lost updates", c.Channel)
		}
		require.Equal(t, invalid, total.Rejected)
		require.Zero(t, total.DeadLettered)
		require.Positive(t, total.Committed)
		for slug, cs := range s.sim.Stats() {
			t.Logf("%s: %+v", slug, cs)
			require.Zero(t, cs.Throttled, "%s saw 429s", slug)
			require.LessOrEqual(t, cs.MaxWindowRequests, cs.Limit, "%s over its limit in one window", slug)
			require.Zero(t, cs.StaleOverwrites, slug)
		}
		recordHistories(t, s.tc, st.BatchID)
	})

	t.Run("429 storm: deferred, then everything committed", func(t *testing.T) {
		before := s.sim.Stats()
		// New prices so the channel sees new content, not idempotent replays.
		bump := decimal.New(1, 0)
		storm := make([]models.Mutation, 0, len(ms))
		for _, m := range ms {
			if m.Amount != nil {
				a := m.Amount.Add(bump)
				m.Amount = &a
			}
			m.Version++
			storm = append(storm, m)
		}
		require.NoError(t, s.sim.SetFaults(sim.Faults{StormSeconds: 8, StormStatus: 429}))
		st := s.runBatch(t, "e2e-storm-"+uuid.NewString()[:8], storm)
		total := st.Totals()
		t.Logf("batch: %+v", total)
		for _, c := range st.Channels {
			require.Equal(t, c.Total, c.Done(), "channel %s lost updates", c.Channel)
		}
		require.Positive(t, total.Deferred, "the storm deferred requests")
		require.Zero(t, total.DeadLettered)
		require.Equal(t, invalid, total.Rejected)
		throttled := 0
		for slug, cs := range s.sim.Stats() {
			throttled += cs.Throttled - before[slug].Throttled
		}
		require.Positive(t, throttled, "the simulator answered 429 during the storm")
		if recording() {
			// The child with the longest history: several lanes, held slots and the
			// storm's 429 waits.
			writeLongestChild(t, s.tc, st.BatchID, "channelsync_storm.json")
		}
	})

	t.Run("silent drift: reconciliation finds it and repairs it", func(t *testing.T) {
		// agoda acknowledges these new prices without applying them.
		drifting := newPrices(ms, v, "agoda", 20, 2)
		require.NoError(t, s.sim.SetFaults(sim.Faults{Channels: []string{"agoda"}, DriftRatio: 1}))
		st := s.runBatch(t, "e2e-drift-"+uuid.NewString()[:8], drifting)
		require.Equal(t, len(drifting), st.Totals().Committed, "the channel said yes to every line")
		require.NoError(t, s.sim.SetFaults(sim.Faults{}))

		channels := []string{"agoda", "booking_com", "expedia"}
		reconcileID := "reconcile/e2e-" + uuid.NewString()[:8]
		res := s.reconcile(t, reconcileID, channels)
		t.Logf("reconcile: %+v", res.Channels)
		require.Len(t, res.Channels, 3)
		require.Equal(t, len(drifting), res.Channels[0].Drifted, "every dropped night is found")
		require.NotNil(t, res.Channels[0].Repair)
		require.Equal(t, len(drifting), res.Channels[0].Repair.Totals().Committed)
		for _, c := range res.Channels[1:] {
			require.Positive(t, c.Checked)
			require.Zero(t, c.Drifted, "%s holds what the ledger says", c.Channel)
		}

		again := s.reconcile(t, "reconcile/e2e-again-"+uuid.NewString()[:8], channels)
		for _, c := range again.Channels {
			require.Zero(t, c.Drifted, "%s still drifts after the repair", c.Channel)
		}
		if recording() {
			writeHistory(t, s.tc, reconcileID, "reconcile.json")
		}
	})

	t.Run("burst smoother: a storm of small submits becomes few batches", func(t *testing.T) {
		burst := newPrices(ms, v, "expedia", 60, 3)
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		for i := 0; i < len(burst); i += 5 {
			res, err := ops.Submit(ctx, s.tc, s.queue, s.acts.Store, models.SmootherInput{Channel: "expedia"}, burst[i:i+5])
			require.NoError(t, err)
			require.Equal(t, 5, res.Accepted)
		}
		var st models.SmootherStatus
		require.Eventually(t, func() bool {
			v, err := s.tc.QueryWorkflow(ctx, models.SmootherWorkflowID("expedia"), "", models.QueryStatus)
			return err == nil && v.Get(&st) == nil && st.Pending == 0 && st.Totals.Done() == len(burst)
		}, 2*time.Minute, 500*time.Millisecond)
		t.Logf("smoother: %+v", st)
		require.Equal(t, len(burst), st.Totals.Committed)
		require.Less(t, st.Flushed, 12/2, "12 submits gathered into a few batches")
		require.NoError(t, s.tc.TerminateWorkflow(ctx, models.SmootherWorkflowID("expedia"), "", "end of test"))
		if recording() {
			writeHistory(t, s.tc, models.SmootherWorkflowID("expedia"), "smoother.json")
		}
	})

	t.Run("burst smoother: a refused submit reaches the client as SmootherFull", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		submit := func(ms []models.Mutation) error {
			_, err := ops.Submit(ctx, s.tc, s.queue, s.acts.Store,
				models.SmootherInput{Channel: "booking_com", MaxPending: 2, Debounce: time.Hour}, ms)
			return err
		}
		prices := newPrices(ms, v, "booking_com", 3, 5)
		require.Len(t, prices, 3)
		require.NoError(t, submit(prices[:2]))
		err := submit(prices[2:])
		var ae *temporal.ApplicationError
		require.ErrorAs(t, err, &ae, "the starter exits 75 (refused) on this type, not 70")
		require.Equal(t, models.ErrSmootherFull, ae.Type())
		require.NoError(t, s.tc.TerminateWorkflow(ctx, models.SmootherWorkflowID("booking_com"), "", "end of test"))
		if recording() {
			writeHistory(t, s.tc, models.SmootherWorkflowID("booking_com"), "smoother_refused.json")
		}
	})

	t.Run("metrics: after the batches, /metrics has every series the dashboard and alerts query", func(t *testing.T) {
		srv := httptest.NewServer(promhttp.HandlerFor(s.metrics, promhttp.HandlerOpts{}))
		defer srv.Close()
		scraped := scrapedNames(t, srv.URL+"/metrics")
		var sdk []string
		for n := range scraped {
			if strings.HasPrefix(n, "temporal_") {
				sdk = append(sdk, n)
			}
		}
		slices.Sort(sdk)
		t.Logf("scrape: %d series names, %d from the Temporal SDK: %s", len(scraped), len(sdk), strings.Join(sdk, " "))
		require.NotEmpty(t, sdk, "the Temporal SDK's metrics share /metrics")
		requireQueriedMetricsIn(t, scraped)
	})
}

// newPrices is up to n valid rate changes of one channel from ms, each raised by
// step and at step versions later, so the channel sees new content.
func newPrices(ms []models.Mutation, v *models.Validator, channel string, n int, step int64) []models.Mutation {
	var out []models.Mutation
	for _, m := range ms {
		if m.Channel == channel && m.Amount != nil && len(v.Validate(m)) == 0 && len(out) < n {
			a := m.Amount.Add(decimal.New(step, 0))
			m.Amount, m.Version = &a, m.Version+step
			out = append(out, m)
		}
	}
	return out
}

func (s *e2eStack) reconcile(t *testing.T, id string, channels []string) models.ReconcileResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	run, err := s.tc.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: s.queue},
		workflows.Reconcile, models.ReconcileInput{Channels: channels, HorizonDays: 30})
	require.NoError(t, err)
	var res models.ReconcileResult
	require.NoError(t, run.Get(ctx, &res), id)
	return res
}

// recording reports whether the end-to-end run should write the histories of its
// workflows to workflows/testdata for the replay tests (PARITYSYNC_RECORD_HISTORY=1).
func recording() bool { return os.Getenv("PARITYSYNC_RECORD_HISTORY") != "" }

// recordHistories writes a real batch's history and one of its children's.
func recordHistories(t *testing.T, tc client.Client, batchID string) {
	if !recording() {
		return
	}
	writeHistory(t, tc, models.BatchWorkflowID(batchID), "batchsync.json")
	resp, err := tc.ListWorkflow(context.Background(), listChildren(batchID))
	require.NoError(t, err)
	require.NotEmpty(t, resp.Executions)
	writeHistory(t, tc, resp.Executions[0].Execution.WorkflowId, "channelsync.json")
}

// writeLongestChild writes the history of the batch's ChannelSync child with the
// most events: the one that went through the most paths.
func writeLongestChild(t *testing.T, tc client.Client, batchID, name string) {
	t.Helper()
	resp, err := tc.ListWorkflow(context.Background(), listChildren(batchID))
	require.NoError(t, err)
	require.NotEmpty(t, resp.Executions)
	var longest *historypb.History
	for _, e := range resp.Executions {
		if h := history(t, tc, e.Execution.WorkflowId); longest == nil || len(h.Events) > len(longest.Events) {
			longest = h
		}
	}
	saveHistory(t, longest, name)
}

// history is the whole history of the workflow's latest run.
func history(t *testing.T, tc client.Client, wfID string) *historypb.History {
	t.Helper()
	var h historypb.History
	iter := tc.GetWorkflowHistory(context.Background(), wfID, "", false, 0)
	for iter.HasNext() {
		e, err := iter.Next()
		require.NoError(t, err)
		h.Events = append(h.Events, e)
	}
	return &h
}

func writeHistory(t *testing.T, tc client.Client, wfID, name string) {
	t.Helper()
	saveHistory(t, history(t, tc, wfID), name)
}

// saveHistory writes h to workflows/testdata/name for the replay test.
func saveHistory(t *testing.T, h *historypb.History, name string) {
	t.Helper()
	b, err := protojson.MarshalOptions{Indent: "  "}.Marshal(h)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join("..", "workflows", "testdata", name), b, 0o644))
}
