package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/redis/go-redis/v9"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/interceptor"
	tlog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/worker"
	"go.uber.org/fx"

	"github.com/paritysync/paritysync/activities"
	"github.com/paritysync/paritysync/dial"
	"github.com/paritysync/paritysync/limiter"
	"github.com/paritysync/paritysync/models"
	"github.com/paritysync/paritysync/workflows"
)

// Getenv reads one environment variable; tests pass their own.
type Getenv func(string) string

// config is the effective configuration: process settings and channel limits.
type config struct {
	fx.Out
	Settings models.Settings
	Channels []models.ChannelConfig
}

func newApp(getenv Getenv, extra ...fx.Option) *fx.App {
	opts := []fx.Option{
		fx.NopLogger,
		fx.Supply(getenv),
		fx.Provide(loadConfig, newRedis, newTemporal, newLimiter, newTokens, newChannelClient, newActivities, newWorker, newMetrics),
		fx.Invoke(func(worker.Worker, *http.Server) {}, registerLimiterGauges),
	}
	return fx.New(append(opts, extra...)...)
}

func loadConfig(getenv Getenv) (config, error) {
	s, err := models.LoadSettings(getenv)
	if err != nil {
		return config{}, startupError{err}
	}
	chs, err := models.LoadChannels(s.ChannelsFile, getenv)
	if err != nil {
		return config{}, startupError{err}
	}
	slog.Info("effective config", "settings", s.String())
	for _, c := range chs {
		slog.Info("channel", "slug", c.Slug, "rate_per_minute", c.RatePerMinute, "burst", c.Burst,
			"scope", c.Scope, "daily_quota", c.DailyQuota, "quota_unit", c.QuotaUnit,
			"max_lines_per_request", c.MaxLinesPerRequest, "horizon_days", c.HorizonDays)
	}
	return config{Settings: s, Channels: chs}, nil
}

// newRedis connects (a cluster when REDIS_URL names several addresses) and pings,
// so an unreachable Redis stops the worker at start.
func newRedis(lc fx.Lifecycle, s models.Settings) (redis.UniversalClient, error) {
	rdb, err := dial.Redis(context.Background(), s.RedisURL)
	if err != nil {
		return nil, startupError{err}
	}
	lc.Append(fx.StopHook(rdb.Close))
	return rdb, nil
}

// newTemporal dials the Temporal frontend, so an unreachable server stops the worker
// at start.
func newTemporal(lc fx.Lifecycle, s models.Settings, sdkMetrics client.MetricsHandler) (client.Client, error) {
	c, err := dial.Temporal(context.Background(), s, client.Options{
		Logger:         tlog.NewStructuredLogger(slog.Default()),
		MetricsHandler: sdkMetrics,
	})
	if err != nil {
		return nil, startupError{err}
	}
	lc.Append(fx.StopHook(c.Close))
	return c, nil
}

func newLimiter(rdb redis.UniversalClient, s models.Settings, chs []models.ChannelConfig) *limiter.Limiter {
	return limiter.New(rdb, chs, limiter.Options{Prefix: s.KeyPrefix, PausePoll: s.PausePoll,
		Lease: s.HTTPTimeout + 5*time.Second})
}

// newTokens prefers the token file, which is re-read when it changes.
func newTokens(s models.Settings) (activities.TokenProvider, error) {
	switch {
	case s.TokenFile != "":
		t, err := activities.NewFileToken(s.TokenFile)
		if err != nil {
			return nil, startupError{err}
		}
		return t, nil
	case s.Token != "":
		return activities.StaticToken(s.Token), nil
	}
	return nil, startupError{errors.New("no channel credential: set PARITYSYNC_TOKEN_FILE or PARITYSYNC_TOKEN")}
}

func newChannelClient(s models.Settings, tokens activities.TokenProvider, chs []models.ChannelConfig) *activities.ChannelClient {
	hc := &http.Client{Transport: &http.Transport{
		MaxIdleConnsPerHost: 64, IdleConnTimeout: 90 * time.Second,
	}}
	return activities.NewChannelClient(hc, s.ChannelURL, tokens, chs, s.HTTPTimeout)
}

func newActivities(s models.Settings, chs []models.ChannelConfig, rdb redis.UniversalClient, lim *limiter.Limiter,
	cc *activities.ChannelClient, tokens activities.TokenProvider, m *activities.Metrics) (*activities.Activities, error) {
	v, err := models.NewValidator(chs, s.PropertyPattern, time.Now)
	if err != nil {
		return nil, startupError{fmt.Errorf("PARITYSYNC_PROPERTY_PATTERN: %w", err)}
	}
	v.Zones = s.Zones
	m.Zero(slugs(chs))
	return &activities.Activities{
		Limiter: lim, Client: cc, Tokens: tokens, Store: activities.NewStore(rdb, s.KeyPrefix),
		Channels: models.ChannelMap(chs), Validator: v, ChunkSize: s.ChunkSize, Metrics: m,
	}, nil
}

// newWorker registers everything on the task queue; the worker starts in a
// non-blocking hook and, on stop, lets in-flight activities finish.
func newWorker(lc fx.Lifecycle, c client.Client, s models.Settings, acts *activities.Activities) worker.Worker {
	w := worker.New(c, s.TaskQueue, worker.Options{
		MaxConcurrentActivityExecutionSize: s.MaxActivities,
		WorkerStopTimeout:                  s.ShutdownTimeout,
		Interceptors:                       []interceptor.WorkerInterceptor{&logKeys{}},
	})
	w.RegisterWorkflow(workflows.BatchSync)
	w.RegisterWorkflow(workflows.ChannelSync)
	w.RegisterWorkflow(workflows.Reconcile)
	w.RegisterWorkflow(workflows.BurstSmoother)
	w.RegisterActivity(acts)
	lc.Append(fx.Hook{
		OnStart: func(context.Context) error {
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
