// Package app is the worker's fx application: configuration, Redis, Temporal,
// PostgreSQL, the limiter, the channel client, the activities and the Temporal
// worker that runs paritysync's workflows, with /metrics and /healthz. The worker's
// main runs it; the system tests (e2e/) start it in process.
package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/interceptor"
	tlog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/worker"
	"go.uber.org/fx"

	"github.com/paritysync/paritysync/activities"
	"github.com/paritysync/paritysync/activities/store"
	"github.com/paritysync/paritysync/channels"
	"github.com/paritysync/paritysync/config"
	"github.com/paritysync/paritysync/dial"
	"github.com/paritysync/paritysync/limiter"
	"github.com/paritysync/paritysync/models"
	"github.com/paritysync/paritysync/workflows"
)

// Getenv reads one environment variable; tests pass their own.
type Getenv func(string) string

// effectiveConfig is the effective configuration: process settings and channel limits.
type effectiveConfig struct {
	fx.Out
	Settings config.Settings
	Channels []models.ChannelConfig
}

// New is the worker's application on getenv's configuration; extra options are
// for tests (fx.Populate of the activities, limiter or metrics registry). A
// dependency that cannot be reached fails it, in Err or Start, with an error
// OneLine reduces to the line an operator needs.
func New(getenv Getenv, extra ...fx.Option) *fx.App {
	opts := []fx.Option{
		fx.NopLogger,
		fx.Supply(getenv),
		fx.Provide(loadConfig, newRedis, newTemporal, newLimiter, newCredentials, newChannelClient, newActivities, newWorker, newMetrics),
		// PostgreSQL, the system of record: opened and migrated at start.
		store.Module,
		fx.Invoke(func(worker.Worker, *http.Server) {}, registerLimiterGauges),
		fx.Invoke(registerLagGauges),
	}
	return fx.New(append(opts, extra...)...)
}

// startupError is a dependency that cannot be reached at start; its message is the
// one line an operator needs, without fx's wrapping.
type startupError struct{ err error }

func (e startupError) Error() string { return e.err.Error() }
func (e startupError) Unwrap() error { return e.err }

// OneLine is err as an operator needs it: a startup error's own line, without fx's
// wrapping; any other error as it is.
func OneLine(err error) error {
	var se startupError
	if errors.As(err, &se) {
		return se
	}
	return err
}

func loadConfig(getenv Getenv) (effectiveConfig, error) {
	s, err := config.LoadSettings(getenv)
	if err != nil {
		return effectiveConfig{}, startupError{err}
	}
	chs, err := config.LoadChannels(s.ChannelsFile, getenv)
	if err != nil {
		return effectiveConfig{}, startupError{err}
	}
	slog.Info("effective config", "settings", s.String())
	for _, c := range chs {
		slog.Info("channel", "slug", c.Slug, "protocol", c.Protocol, "read_back", c.ReadBack, "rate_per_minute", c.RatePerMinute, "burst", c.Burst,
			"scope", c.Scope, "daily_quota", c.DailyQuota, "quota_unit", c.QuotaUnit,
			"max_lines_per_request", c.MaxLinesPerRequest, "horizon_days", c.HorizonDays)
	}
	return effectiveConfig{Settings: s, Channels: chs}, nil
}

// newRedis connects (a cluster when REDIS_URL names several addresses) and pings,
// so an unreachable Redis stops the worker at start.
func newRedis(lc fx.Lifecycle, s config.Settings) (redis.UniversalClient, error) {
	rdb, err := dial.Redis(context.Background(), s.RedisURL)
	if err != nil {
		return nil, startupError{err}
	}
	lc.Append(fx.StopHook(rdb.Close))
	return rdb, nil
}

// newTemporal dials the Temporal frontend, so an unreachable server stops the worker
// at start.
func newTemporal(lc fx.Lifecycle, s config.Settings, sdkMetrics client.MetricsHandler) (client.Client, error) {
	c, err := dial.Temporal(context.Background(), s, client.Options{
		Logger:         tlog.NewStructuredLogger(slog.Default()),
		MetricsHandler: sdkMetrics,
		// The identity names the key prefix, so a worker with another one on the
		// same task queue sees it (checkTaskQueuePrefix).
		Identity: workerIdentity(s.KeyPrefix),
	})
	if err != nil {
		return nil, startupError{err}
	}
	lc.Append(fx.StopHook(c.Close))
	return c, nil
}

// newLimiter builds the limiter and checks that every channel's budget (rate,
// burst, scope, window) is the one the other workers on this Redis use: a worker
// that would split a channel's budget stops at start, naming the channel and field.
func newLimiter(rdb redis.UniversalClient, s config.Settings, chs []models.ChannelConfig) (*limiter.Limiter, error) {
	lim := limiter.New(rdb, chs, limiter.Options{Prefix: s.KeyPrefix, PausePoll: s.PausePoll,
		Lease: s.HTTPTimeout + 5*time.Second, Zones: s.Zones})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := lim.CheckConfig(ctx); err != nil {
		return nil, startupError{err}
	}
	return lim, nil
}

// newCredentials gives every channel its own credential: its credentials_file, or
// else the shared PARITYSYNC_TOKEN_FILE or PARITYSYNC_TOKEN. A channel with none,
// or whose file cannot be read, stops the worker at start, naming the channel.
func newCredentials(s config.Settings, chs []models.ChannelConfig) (channels.Credentials, error) {
	var shared channels.Credential
	sharedFrom := ""
	switch {
	case s.TokenFile != "":
		fc, err := channels.NewFileCredential(s.TokenFile)
		if err != nil {
			return nil, startupError{fmt.Errorf("PARITYSYNC_TOKEN_FILE: %w", err)}
		}
		shared, sharedFrom = fc, "PARITYSYNC_TOKEN_FILE"
	case s.Token != "":
		shared, sharedFrom = channels.StaticCredential(s.Token), "PARITYSYNC_TOKEN"
	}
	creds := channels.Credentials{}
	var errs []error
	for _, c := range chs {
		from := sharedFrom
		switch {
		case c.CredentialsFile != "":
			fc, err := channels.NewFileCredential(c.CredentialsFile)
			if err != nil {
				errs = append(errs, fmt.Errorf("channel %s: credentials_file: %w", c.Slug, err))
				continue
			}
			creds[c.Slug], from = fc, c.CredentialsFile
		case shared != nil:
			creds[c.Slug] = shared
		default:
			errs = append(errs, fmt.Errorf("channel %s: no credential: set its credentials_file (or %s%s_CREDENTIALS_FILE), "+
				"or the shared PARITYSYNC_TOKEN_FILE or PARITYSYNC_TOKEN", c.Slug, config.EnvChannelPrefix, strings.ToUpper(c.Slug)))
			continue
		}
		slog.Info("channel credential", "slug", c.Slug, "protocol", c.Protocol, "from", from)
	}
	if len(errs) > 0 {
		return nil, startupError{errors.Join(errs...)}
	}
	return creds, nil
}

func newChannelClient(s config.Settings, creds channels.Credentials, chs []models.ChannelConfig) *channels.Client {
	hc := &http.Client{Transport: &http.Transport{
		MaxIdleConnsPerHost: 64, IdleConnTimeout: 90 * time.Second,
	}}
	return channels.New(hc, s.ChannelURL, creds, chs, s.HTTPTimeout)
}

func newActivities(s config.Settings, chs []models.ChannelConfig, st *store.Store, lim *limiter.Limiter,
	cc *channels.Client, creds channels.Credentials, m *activities.Metrics) (*activities.Activities, error) {
	// The codes of properties mapped over the API, laid over the YAML's and read
	// through a short cache: a property mapped now is pushed without a restart.
	mappings := st.NewMappings(chs, store.DefaultMappingsTTL)
	cc.UseConfigs(mappings.ChannelFor)
	v, err := models.NewValidator(chs, s.PropertyPattern, time.Now)
	if err != nil {
		return nil, startupError{fmt.Errorf("PARITYSYNC_PROPERTY_PATTERN: %w", err)}
	}
	v.Zones = s.Zones
	m.Zero(slugs(chs))
	return &activities.Activities{
		Limiter: lim, Client: cc, Tokens: creds, Store: st,
		Channels: models.ChannelMap(chs), Validator: v, Mappings: mappings, ChunkSize: s.ChunkSize, MaxInFlight: s.MaxInFlight, Metrics: m,
	}, nil
}

// newWorker registers everything on the task queue; the worker starts in a
// non-blocking hook and, on stop, lets in-flight activities finish.
func newWorker(lc fx.Lifecycle, c client.Client, s config.Settings, acts *activities.Activities) worker.Worker {
	w := worker.New(c, s.TaskQueue, worker.Options{
		MaxConcurrentActivityExecutionSize: s.MaxActivities,
		WorkerStopTimeout:                  s.ShutdownTimeout,
		Interceptors:                       []interceptor.WorkerInterceptor{&logKeys{}},
	})
	w.RegisterWorkflow(workflows.BatchSync)
	w.RegisterWorkflow(workflows.ChannelSync)
	w.RegisterWorkflow(workflows.Reconcile)
	w.RegisterWorkflow(workflows.BurstSmoother)
	activities.Register(w, acts)
	lc.Append(fx.Hook{
		OnStart: func(ctx context.Context) error {
			// Before polling: a worker of this task queue with another key prefix
			// would keep a second budget for every channel.
			if err := checkTaskQueuePrefix(ctx, c, s.TaskQueue, s.KeyPrefix, time.Now()); err != nil {
				return startupError{err}
			}
			if err := w.Start(); err != nil {
				return fmt.Errorf("start worker: %w", err)
			}
			slog.Info("worker started", "task_queue", s.TaskQueue, "temporal", s.TemporalAddress)
			return nil
		},
		OnStop: func(context.Context) error {
			w.Stop()
			slog.Info("worker stopped")
			return nil
		},
	})
	return w
}

func slugs(chs []models.ChannelConfig) []string {
	out := make([]string, len(chs))
	for i, c := range chs {
		out[i] = c.Slug
	}
	return out
}
