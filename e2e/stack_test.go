package e2e

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
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.uber.org/fx"

	"github.com/paritysync/paritysync/activities"
	"github.com/paritysync/paritysync/activities/store"
	"github.com/paritysync/paritysync/activities/store/storetest"
	"github.com/paritysync/paritysync/config"
	"github.com/paritysync/paritysync/dial/devtest"
	"github.com/paritysync/paritysync/dial/redistest"
	"github.com/paritysync/paritysync/limiter"
	"github.com/paritysync/paritysync/models"
	"github.com/paritysync/paritysync/otasim/sim"
	"github.com/paritysync/paritysync/worker/app"
	"github.com/paritysync/paritysync/workflows"
)

// The harness every system test, benchmark and production-topology scenario
// starts its stack with: a worker environment, a simulator enforcing the same
// limits, and workers, on a Temporal dev server (startStackWith) or on the
// production topology (prod_topology_test.go, newProdStack).

// TestMain stops the package's one dev server (devtest) after the tests.
func TestMain(m *testing.M) { devtest.Main(m) }

// temporalCLI finds the Temporal CLI binary that `make test` builds.
func temporalCLI(t *testing.T) string {
	t.Helper()
	path, err := devtest.CLI()
	if err != nil {
		t.Fatalf("no Temporal CLI at %s (make test builds it into .bin/; or set TEMPORAL_CLI): %v", path, err)
	}
	return path
}

// startDevServer is the test's namespace on the package's dev server (devtest: the
// new matcher with one partition and paritysync's search attributes, as production
// should run); it skips under -short.
func startDevServer(t *testing.T) *devtest.Env {
	t.Helper()
	return devtest.Start(t)
}

// parallelDevServer is startDevServer for a test that runs beside the others: it
// mostly waits on its channels' windows, and its stack shares nothing with theirs
// (a namespace, task queue, key prefix and schema of its own).
func parallelDevServer(t *testing.T) *devtest.Env {
	t.Helper()
	if testing.Short() {
		t.Skip("end-to-end: needs a Temporal dev server")
	}
	t.Parallel()
	return startDevServer(t)
}

// e2eStack is a simulator and the workers of one task queue sharing a key prefix
// and a PostgreSQL schema.
type e2eStack struct {
	// acts, lim and metrics (the /metrics registry) are the first in-process
	// worker's, for tests that call them directly.
	acts    *activities.Activities
	lim     *limiter.Limiter
	metrics *prometheus.Registry
	env     map[string]string
	tc      client.Client
	sim     *sim.Simulator
	// rdb is the dev-server stacks' Redis (nil on the production topology).
	rdb    *redis.Client
	prefix string
	queue  string
	// app is the newest in-process worker; apps are all of them.
	app  *fx.App
	apps []*fx.App
}

func (s *e2eStack) getenv(k string) string { return s.env[k] }

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
	// Sim changes the simulator's configuration (faults, clock, channels, tokens)
	// before it starts; Serve, when set, wraps its handler (to see every exchange).
	Sim   func(*sim.Config)
	Serve func(http.Handler) http.Handler
}

// testWindow is the short window of the tests whose assertions are relative to it:
// a tenth of the real 60 s, long against the limiter's 500 ms lateness margin.
const testWindow = 6 * time.Second

// limitsOptions gives each channel of limits its limit (per window), a burst of a
// tenth of it (at least 2) and 4 lines a request.
func limitsOptions(limits map[string]int, env []func(map[string]string)) stackOptions {
	chs := map[string]stackChannel{}
	for slug, limit := range limits {
		chs[slug] = stackChannel{PerMinute: limit, Burst: max(2, limit/10), MaxLines: 4}
	}
	return stackOptions{Channels: chs, Edit: env}
}

// startStack starts a simulator and a worker on srv; env changes the worker's
// environment before it starts.
func startStack(t *testing.T, srv *devtest.Env, limits map[string]int, env ...func(map[string]string)) *e2eStack {
	t.Helper()
	return startStackWith(t, srv, limitsOptions(limits, env))
}

// startShortStack is startStack at the short test window: each channel's limit
// counts per testWindow instead of per minute.
func startShortStack(t *testing.T, srv *devtest.Env, limits map[string]int, env ...func(map[string]string)) *e2eStack {
	t.Helper()
	o := limitsOptions(limits, env)
	o.Window = testWindow
	return startStackWith(t, srv, o)
}

// newStack is a stack's own key prefix, task queue, PostgreSQL schema (dropped at
// the end) and simulator, and the worker environment o asks for over base (the
// topology's Redis and Temporal). The simulator enforces exactly the limits and
// windows the workers are configured with. kind names the prefix, queue, schema
// and token.
func newStack(t *testing.T, kind string, base map[string]string, o stackOptions) *e2eStack {
	t.Helper()
	id := uuid.NewString()[:8]
	s := &e2eStack{prefix: "paritysync-" + kind + "-" + id + ":", queue: "paritysync-" + kind + "-" + id}
	token := kind + "-token"
	s.env = map[string]string{
		"PARITYSYNC_TASK_QUEUE":   s.queue,
		"PARITYSYNC_KEY_PREFIX":   s.prefix,
		"PARITYSYNC_TOKEN":        token,
		"PARITYSYNC_METRICS_ADDR": "127.0.0.1:0",
		"PARITYSYNC_DATABASE_URL": storetest.Schema(t, kind),
	}
	maps.Copy(s.env, base)
	for slug, c := range o.Channels {
		up := strings.ToUpper(slug)
		s.env["PARITYSYNC_CHANNEL_"+up+"_RATE_PER_MINUTE"] = fmt.Sprint(c.PerMinute)
		s.env["PARITYSYNC_CHANNEL_"+up+"_BURST"] = fmt.Sprint(c.Burst)
		s.env["PARITYSYNC_CHANNEL_"+up+"_MAX_LINES_PER_REQUEST"] = fmt.Sprint(c.MaxLines)
	}
	maps.Copy(s.env, o.Env)
	if o.Window > 0 {
		s.env["PARITYSYNC_CHANNELS_FILE"] = windowFile(t, o.Window, o.Channels)
	}
	for _, f := range o.Edit {
		f(s.env)
	}
	chs, err := config.LoadChannels(s.env["PARITYSYNC_CHANNELS_FILE"], s.getenv)
	require.NoError(t, err)
	simCfg := sim.Config{Channels: chs, StaticTokens: []string{token}}
	if o.Sim != nil {
		o.Sim(&simCfg)
	}
	s.sim = sim.New(simCfg)
	t.Cleanup(s.sim.Close)
	return s
}

// startStackWith starts a stack on srv: the simulator over HTTP, the local Redis
// and o.Workers (at least one) in-process workers.
func startStackWith(t *testing.T, srv *devtest.Env, o stackOptions) *e2eStack {
	t.Helper()
	redisURL := redistest.Reachable(t)
	s := newStack(t, "e2e", map[string]string{
		"REDIS_URL":          redisURL,
		"TEMPORAL_ADDRESS":   srv.FrontendHostPort(),
		"TEMPORAL_NAMESPACE": srv.Namespace(),
		// Small chunks: a batch runs in many children.
		"PARITYSYNC_CHUNK_SIZE": "5",
	}, o)
	opt, err := redis.ParseURL(redisURL)
	require.NoError(t, err)
	s.rdb = redis.NewClient(opt)
	require.NoError(t, s.rdb.Ping(context.Background()).Err(), "Redis at %s", redisURL)
	t.Cleanup(func() {
		redistest.Clean(t, s.rdb, s.prefix)
		_ = s.rdb.Close()
	})
	var h http.Handler = s.sim
	if o.Serve != nil {
		h = o.Serve(h)
	}
	httpSrv := httptest.NewServer(h)
	t.Cleanup(httpSrv.Close)
	s.env["PARITYSYNC_CHANNEL_URL"] = httpSrv.URL
	s.tc = srv.Client()

	// Registered last, so the workers stop before the simulator's server closes.
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for _, a := range s.apps {
			_ = a.Stop(ctx)
		}
	})
	for range max(1, o.Workers) {
		s.startWorker(t)
	}
	return s
}

// windowFile is a channels file that gives every channel of chs the window w (a
// window is set only per channel, in the file, never by the environment).
func windowFile(t *testing.T, w time.Duration, chs map[string]stackChannel) string {
	t.Helper()
	var b strings.Builder
	b.WriteString("channels:\n")
	for _, slug := range slices.Sorted(maps.Keys(chs)) {
		fmt.Fprintf(&b, "  - slug: %s\n    window: %s\n", slug, w)
	}
	return writeFile(t, t.TempDir(), "channels.yaml", b.String())
}

// writeFile writes content to dir/name and returns the path.
func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	require.NoError(t, os.WriteFile(path, []byte(content), 0o600))
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
	a, err := s.startApp(s.getenv, extra...)
	require.NoError(t, err)
	s.app = a
}

// startApp starts the worker's application on getenv, as the worker's main does,
// and returns what stopped it; a started one stops with the stack.
func (s *e2eStack) startApp(getenv app.Getenv, extra ...fx.Option) (*fx.App, error) {
	a := app.New(getenv, extra...)
	if err := a.Err(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := a.Start(ctx); err != nil {
		return nil, err
	}
	s.apps = append(s.apps, a)
	return a, nil
}

// openStore opens the stack's system of record for the test's own checks.
func (s *e2eStack) openStore(t *testing.T) *store.Store {
	t.Helper()
	st, err := store.Open(context.Background(), s.env["PARITYSYNC_DATABASE_URL"])
	require.NoError(t, err)
	t.Cleanup(st.Close)
	return st
}

// startBatch starts a batch without waiting for it.
func (s *e2eStack) startBatch(t *testing.T, in models.BatchSyncInput) client.WorkflowRun {
	t.Helper()
	run, err := s.tc.ExecuteWorkflow(context.Background(), client.StartWorkflowOptions{
		ID: models.BatchWorkflowID(in.BatchID), TaskQueue: s.queue,
		TypedSearchAttributes: temporal.NewSearchAttributes(
			temporal.NewSearchAttributeKeyKeyword(models.SearchAttrBatchID).ValueSet(in.BatchID)),
	}, workflows.BatchSync, in)
	require.NoError(t, err)
	return run
}

// startMutations starts a BatchSync of ms inline and returns its run.
func (s *e2eStack) startMutations(t *testing.T, batchID string, ms []models.Mutation) client.WorkflowRun {
	t.Helper()
	return s.startBatch(t, models.BatchSyncInput{BatchID: batchID, Mutations: ms, Retry: models.DefaultRetryPolicy()})
}

// runBatch runs a BatchSync of ms inline to its end.
func (s *e2eStack) runBatch(t *testing.T, batchID string, ms []models.Mutation) models.BatchStatus {
	t.Helper()
	return waitBatch(t, s.startMutations(t, batchID, ms), 6*time.Minute)
}

// waitBatch waits for a batch's status.
func waitBatch(t *testing.T, run client.WorkflowRun, timeout time.Duration) models.BatchStatus {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var st models.BatchStatus
	require.NoError(t, run.Get(ctx, &st), "batch %s", run.GetID())
	return st
}

// reconcile runs a Reconcile of channels to its end.
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
