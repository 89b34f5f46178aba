// Package stack is the harness every test that runs the worker on real parts
// starts it with: a key prefix, task queue and PostgreSQL schema of the test's own,
// the simulator enforcing exactly the workers' limits, and the worker's application
// (worker/app) polling a Temporal dev server (Start) — or, with New, the same
// environment and simulator for a topology that starts its own workers (e2e's
// production topology). The system tests (e2e), the API's end-to-end tests (intake)
// and the starter's all use it, so the wiring stands once.
//
//	s := stack.Start(t, "e2e", devtest.Start(t), stack.Options{Channels: ...})
//	... s.TC, s.Queue, s.Sim, s.Env, s.OpenStore(t) ...
package stack

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"
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
)

// Stack is a simulator and the workers of one task queue sharing a key prefix and
// a PostgreSQL schema.
type Stack struct {
	// Acts, Lim and Metrics (the /metrics registry) are the first in-process
	// worker's, for tests that call them directly.
	Acts    *activities.Activities
	Lim     *limiter.Limiter
	Metrics *prometheus.Registry
	// Env is the workers' environment (Getenv reads it).
	Env map[string]string
	TC  client.Client
	Sim *sim.Simulator
	// RDB is the dev-server stacks' Redis (nil on a topology of New's).
	RDB    *redis.Client
	Prefix string
	Queue  string
	// App is the newest in-process worker; Apps are all of them.
	App  *fx.App
	Apps []*fx.App
	// worker are the options every in-process worker starts with (Options.Worker).
	worker []fx.Option
}

// Getenv reads the workers' environment.
func (s *Stack) Getenv(k string) string { return s.Env[k] }

// Channel overrides one channel's limits for a stack.
type Channel struct {
	PerMinute, Burst, MaxLines int
}

// Options shapes a stack: channel limits, how many workers poll its task queue and
// extra worker environment.
type Options struct {
	Channels map[string]Channel
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
	// Worker are extra fx options of every in-process worker (an fx.Decorate of
	// its channels, say).
	Worker []fx.Option
	// PoolConns bounds each worker's PostgreSQL pool (pool_max_conns in its
	// database URL). 0 is testPoolConns: the stacks of a test run share one
	// PostgreSQL server of 100 connections, and three workers sized to their
	// activity slots (36 each) would take them all. -1 keeps the worker's own
	// sizing, for the benchmarks, which run one stack at a time and measure the
	// push path.
	PoolConns int
}

// testPoolConns is a test stack's pool per worker: pgx's own default on 2 CPUs,
// with which every system test passes.
const testPoolConns = 4

// EveryChannel is the worker environment that gives each default channel
// perMinute requests a minute (its burst and lines per request the defaults).
func EveryChannel(perMinute int) map[string]string {
	env := map[string]string{}
	for _, c := range models.DefaultChannels() {
		env[config.EnvChannelPrefix+strings.ToUpper(c.Slug)+"_RATE_PER_MINUTE"] = strconv.Itoa(perMinute)
	}
	return env
}

// New is a stack's own key prefix, task queue, PostgreSQL schema (dropped at the
// end) and simulator, and the worker environment o asks for over base (the
// topology's Redis and Temporal). The simulator enforces exactly the limits and
// windows the workers are configured with. kind names the prefix, queue, schema
// and token.
func New(t *testing.T, kind string, base map[string]string, o Options) *Stack {
	t.Helper()
	id := uuid.NewString()[:8]
	s := &Stack{Prefix: "paritysync-" + kind + "-" + id + ":", Queue: "paritysync-" + kind + "-" + id, worker: o.Worker}
	token := kind + "-token"
	s.Env = map[string]string{
		"PARITYSYNC_TASK_QUEUE":   s.Queue,
		"PARITYSYNC_KEY_PREFIX":   s.Prefix,
		"PARITYSYNC_TOKEN":        token,
		"PARITYSYNC_METRICS_ADDR": "127.0.0.1:0",
		"PARITYSYNC_DATABASE_URL": storetest.Schema(t, kind),
	}
	maps.Copy(s.Env, base)
	for slug, c := range o.Channels {
		up := strings.ToUpper(slug)
		s.Env["PARITYSYNC_CHANNEL_"+up+"_RATE_PER_MINUTE"] = fmt.Sprint(c.PerMinute)
		s.Env["PARITYSYNC_CHANNEL_"+up+"_BURST"] = fmt.Sprint(c.Burst)
		s.Env["PARITYSYNC_CHANNEL_"+up+"_MAX_LINES_PER_REQUEST"] = fmt.Sprint(c.MaxLines)
	}
	maps.Copy(s.Env, o.Env)
	if o.Window > 0 {
		s.Env["PARITYSYNC_CHANNELS_FILE"] = WindowFile(t, o.Window, o.Channels)
	}
	if url := s.Env["PARITYSYNC_DATABASE_URL"]; o.PoolConns >= 0 && !strings.Contains(url, "pool_max_conns") {
		n := o.PoolConns
		if n == 0 {
			n = testPoolConns
		}
		sep := "?"
		if strings.Contains(url, "?") {
			sep = "&"
		}
		s.Env["PARITYSYNC_DATABASE_URL"] = url + sep + "pool_max_conns=" + strconv.Itoa(n)
	}
	for _, f := range o.Edit {
		f(s.Env)
	}
	chs, err := config.LoadChannels(s.Env["PARITYSYNC_CHANNELS_FILE"], s.Getenv)
	require.NoError(t, err)
	simCfg := sim.Config{Channels: chs, StaticTokens: []string{token}}
	if o.Sim != nil {
		o.Sim(&simCfg)
	}
	s.Sim = sim.New(simCfg)
	t.Cleanup(s.Sim.Close)
	return s
}

// Start starts a stack on srv: the simulator over HTTP, the local Redis and
// o.Workers (at least one) in-process workers.
func Start(t *testing.T, kind string, srv *devtest.Env, o Options) *Stack {
	t.Helper()
	redisURL := redistest.Reachable(t)
	s := New(t, kind, map[string]string{
		"REDIS_URL":          redisURL,
		"TEMPORAL_ADDRESS":   srv.FrontendHostPort(),
		"TEMPORAL_NAMESPACE": srv.Namespace(),
		// Small chunks: a batch runs in many children.
		"PARITYSYNC_CHUNK_SIZE": "5",
	}, o)
	opt, err := redis.ParseURL(redisURL)
	require.NoError(t, err)
	s.RDB = redis.NewClient(opt)
	require.NoError(t, s.RDB.Ping(context.Background()).Err(), "Redis at %s", redisURL)
	t.Cleanup(func() {
		redistest.Clean(t, s.RDB, s.Prefix)
		_ = s.RDB.Close()
	})
	var h http.Handler = s.Sim
	if o.Serve != nil {
		h = o.Serve(h)
	}
	httpSrv := httptest.NewServer(h)
	t.Cleanup(httpSrv.Close)
	s.Env["PARITYSYNC_CHANNEL_URL"] = httpSrv.URL
	s.TC = srv.Client()

	// Registered last, so the workers stop before the simulator's server closes.
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for _, a := range s.Apps {
			_ = a.Stop(ctx)
		}
	})
	for range max(1, o.Workers) {
		s.StartWorker(t)
	}
	return s
}

// WindowFile is a channels file that gives every channel of chs the window w (a
// window is set only per channel, in the file, never by the environment).
func WindowFile(t *testing.T, w time.Duration, chs map[string]Channel) string {
	t.Helper()
	var b strings.Builder
	b.WriteString("channels:\n")
	for _, slug := range slices.Sorted(maps.Keys(chs)) {
		fmt.Fprintf(&b, "  - slug: %s\n    window: %s\n", slug, w)
	}
	return WriteFile(t, t.TempDir(), "channels.yaml", b.String())
}

// WriteFile writes content to dir/name and returns the path.
func WriteFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	require.NoError(t, os.WriteFile(path, []byte(content), 0o600))
	return path
}

// StartWorker starts one more worker on the stack's task queue (again, after a test
// stopped one); s.App is the newest. The first one's activities, limiter and
// metrics registry are the stack's, for tests that call them directly.
func (s *Stack) StartWorker(t *testing.T) {
	t.Helper()
	var extra []fx.Option
	if len(s.Apps) == 0 {
		extra = append(extra, fx.Populate(&s.Acts, &s.Lim, &s.Metrics))
	}
	a, err := s.StartApp(s.Getenv, extra...)
	require.NoError(t, err)
	s.App = a
}

// StartApp starts the worker's application on getenv, as the worker's main does,
// with the stack's worker options and extra, and returns what stopped it; a
// started one stops with the stack.
func (s *Stack) StartApp(getenv app.Getenv, extra ...fx.Option) (*fx.App, error) {
	a := app.New(getenv, append(slices.Clone(s.worker), extra...)...)
	if err := a.Err(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := a.Start(ctx); err != nil {
		return nil, err
	}
	s.Apps = append(s.Apps, a)
	return a, nil
}

// OpenStore opens the stack's system of record for the test's own checks.
func (s *Stack) OpenStore(t *testing.T) *store.Store {
	t.Helper()
	st, err := store.Open(context.Background(), s.Env["PARITYSYNC_DATABASE_URL"])
	require.NoError(t, err)
	t.Cleanup(st.Close)
	return st
}
