package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"
	"go.temporal.io/sdk/client"
	tlog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/worker"
	"go.uber.org/fx"

	"github.com/paritysync/paritysync/activities"
	"github.com/paritysync/paritysync/activities/store"
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
		// PostgreSQL, the system of record: opened and migrated at start.
		store.Module,
		fx.Invoke(func(worker.Worker, *http.Server) {}),
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

// newRedis connects and pings, so an unreachable Redis stops the worker at start.
func newRedis(lc fx.Lifecycle, s models.Settings) (*redis.Client, error) {
	opt, err := redis.ParseURL(s.RedisURL)
	if err != nil {
		return nil, startupError{fmt.Errorf("REDIS_URL %s: %w", models.MaskURL(s.RedisURL), err)}
	}
	rdb := redis.NewClient(opt)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := rdb.Ping(ctx).Err(); err != nil {
		_ = rdb.Close()
		return nil, startupError{fmt.Errorf("redis at %s unreachable: %w", models.MaskURL(s.RedisURL), err)}
	}
	lc.Append(fx.StopHook(rdb.Close))
	return rdb, nil
}

// newTemporal dials the Temporal frontend, so an unreachable server stops the worker
// at start.
func newTemporal(lc fx.Lifecycle, s models.Settings) (client.Client, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.DialContext(ctx, client.Options{
		HostPort: s.TemporalAddress, Namespace: s.TemporalNamespace,
		Logger: tlog.NewStructuredLogger(slog.Default()),
	})
	if err != nil {
		return nil, startupError{fmt.Errorf("temporal at %s unreachable: %w", s.TemporalAddress, err)}
	}
	lc.Append(fx.StopHook(c.Close))
	return c, nil
}

func newLimiter(rdb *redis.Client, s models.Settings, chs []models.ChannelConfig) *limiter.Limiter {
	return limiter.New(rdb, chs, limiter.Options{Prefix: s.KeyPrefix})
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

func newActivities(s models.Settings, chs []models.ChannelConfig, st *store.Store, lim *limiter.Limiter,
	cc *activities.ChannelClient, tokens activities.TokenProvider, m *activities.Metrics) (*activities.Activities, error) {
	v, err := models.NewValidator(chs, s.PropertyPattern, time.Now)
	if err != nil {
		return nil, startupError{fmt.Errorf("PARITYSYNC_PROPERTY_PATTERN: %w", err)}
	}
	return &activities.Activities{
		Limiter: lim, Client: cc, Tokens: tokens, Store: st,
		Channels: models.ChannelMap(chs), Validator: v, ChunkSize: s.ChunkSize, Metrics: m,
	}, nil
}

// newWorker registers everything on the task queue; the worker starts in a
// non-blocking hook and, on stop, lets in-flight activities finish.
func newWorker(lc fx.Lifecycle, c client.Client, s models.Settings, acts *activities.Activities) worker.Worker {
	w := worker.New(c, s.TaskQueue, worker.Options{
		MaxConcurrentActivityExecutionSize: s.MaxActivities,
		WorkerStopTimeout:                  s.ShutdownTimeout,
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

type metricsOut struct {
	fx.Out
	Metrics *activities.Metrics
	Server  *http.Server
}

// newMetrics serves /metrics and /healthz; the listener opens at start so a taken
// port is reported at once.
func newMetrics(lc fx.Lifecycle, s models.Settings) metricsOut {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m := activities.NewMetrics(reg)
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	srv := &http.Server{Addr: s.MetricsAddr, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	lc.Append(fx.Hook{
		OnStart: func(context.Context) error {
			ln, err := net.Listen("tcp", s.MetricsAddr)
			if err != nil {
				return startupError{fmt.Errorf("metrics address %s: %w", s.MetricsAddr, err)}
			}
			go func() {
				if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
					slog.Error("metrics server", "error", err)
				}
			}()
			return nil
		},
		OnStop: srv.Shutdown,
	})
	return metricsOut{Metrics: m, Server: srv}
}
