package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.temporal.io/sdk/client"
	temporalotel "go.temporal.io/sdk/contrib/opentelemetry"
	"go.uber.org/fx"

	"github.com/paritysync/paritysync/activities"
	"github.com/paritysync/paritysync/config"
	"github.com/paritysync/paritysync/limiter"
	"github.com/paritysync/paritysync/models"
)

type metricsOut struct {
	fx.Out
	Registry   *prometheus.Registry
	Metrics    *activities.Metrics
	SDKMetrics client.MetricsHandler
	Server     *http.Server
}

// latencyBuckets are the histogram buckets of the Temporal SDK's timers, in
// seconds: from a fast poll to a long schedule-to-start under back-pressure.
var latencyBuckets = []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300}

// newMetrics serves /metrics and /healthz on one registry: the Go runtime and
// process, paritysync's own counters and gauges, and the Temporal SDK's metrics
// (through its OpenTelemetry handler and the OpenTelemetry Prometheus exporter).
// The listener opens at start so a taken port is reported at once.
func newMetrics(lc fx.Lifecycle, s config.Settings) (metricsOut, error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	exporter, err := otelprom.New(otelprom.WithRegisterer(reg), otelprom.WithoutScopeInfo())
	if err != nil {
		return metricsOut{}, startupError{fmt.Errorf("temporal sdk metrics: %w", err)}
	}
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter), sdkmetric.WithView(sdkmetric.NewView(
		sdkmetric.Instrument{Unit: "s"},
		sdkmetric.Stream{Aggregation: sdkmetric.AggregationExplicitBucketHistogram{Boundaries: latencyBuckets}},
	)))
	sdk := temporalotel.NewMetricsHandler(temporalotel.MetricsHandlerOptions{
		Meter:                provider.Meter("temporal-sdk-go"),
		UseMonotonicCounters: true,
		OnError:              func(err error) { slog.Warn("temporal sdk metric", "error", err) },
	})
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
		OnStop: func(ctx context.Context) error {
			return errors.Join(srv.Shutdown(ctx), provider.Shutdown(ctx))
		},
	})
	return metricsOut{Registry: reg, Metrics: m, SDKMetrics: sdk, Server: srv}, nil
}

// limiterStatus is the part of the limiter the gauges read.
type limiterStatus interface {
	Status(ctx context.Context, channel string) (limiter.Status, error)
}

// limiterGauges reads every channel's limiter state from Redis at scrape time, so
// the gauges are the shared state every worker sees, not this worker's view.
type limiterGauges struct {
	lim      limiterStatus
	channels []string
	timeout  time.Duration

	up, used, limit, tier, backoff, paused, window, ahead, breaker, stopped, backedOff *prometheus.Desc
}

// tierValue orders the quota tiers for the tier gauge and for alerts on it.
var tierValue = map[limiter.Tier]float64{limiter.TierOK: 0, limiter.TierWarn: 1, limiter.TierPage: 2,
	limiter.TierThrottle: 3, limiter.TierStop: 4}

func newLimiterGauges(lim limiterStatus, chs []models.ChannelConfig) *limiterGauges {
	g := &limiterGauges{lim: lim, timeout: 2 * time.Second,
		up: prometheus.NewDesc("paritysync_limiter_up", "1 when the limiter state could be read from Redis at this scrape.", nil, nil),
		used: prometheus.NewDesc("paritysync_quota_daily_used", "Daily quota used today, by channel (in the channel's quota unit).",
			[]string{"channel"}, nil),
		limit: prometheus.NewDesc("paritysync_quota_daily_limit", "Daily quota of the channel.", []string{"channel"}, nil),
		tier: prometheus.NewDesc("paritysync_quota_tier",
			"Daily quota tier: 0 ok, 1 warn (≥70 %), 2 page (≥85 %), 3 throttle (≥95 %), 4 stop (100 %).", []string{"channel"}, nil),
		backoff: prometheus.NewDesc("paritysync_channel_backoff_seconds",
			"What is left of the channel-wide back-off written after a 429 or 503.", []string{"channel"}, nil),
		paused: prometheus.NewDesc("paritysync_channel_paused", "1 while an operator pause holds the channel.", []string{"channel"}, nil),
		window: prometheus.NewDesc("paritysync_window_slots",
			"Slots the channel-wide 60 s window holds now (sent, or held and due).", []string{"channel"}, nil),
		breaker: prometheus.NewDesc("paritysync_breaker_open",
			"1 while the channel's circuit breaker is open or half-open (a probe tests the channel).", []string{"channel"}, nil),
		ahead: prometheus.NewDesc("paritysync_slots_reserved_ahead",
			"Future slots held for waiting requests on the channel-wide schedule.", []string{"channel"}, nil),
		stopped: prometheus.NewDesc("paritysync_family_stopped",
			"1 while the channel stops the endpoint family after a quota_exhausted answer (until its quota resets).",
			[]string{"channel", "family"}, nil),
		backedOff: prometheus.NewDesc("paritysync_backoff_properties",
			"Properties' windows a 429 backed off on a channel that limits per property (the channel's other properties go on).",
			[]string{"channel"}, nil),
	}
	g.channels = slugs(chs)
	return g
}

// Describe implements prometheus.Collector.
func (g *limiterGauges) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{g.up, g.used, g.limit, g.tier, g.backoff, g.paused, g.window, g.ahead, g.breaker,
		g.stopped, g.backedOff} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (g *limiterGauges) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), g.timeout)
	defer cancel()
	up := 1.0
	for _, slug := range g.channels {
		st, err := g.lim.Status(ctx, slug)
		if err != nil {
			up = 0
			slog.Warn("limiter gauges", "channel", slug, "error", err)
			continue
		}
		gauge := func(d *prometheus.Desc, v float64, labels ...string) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
		}
		gauge(g.used, float64(st.DailyUsed), slug)
		gauge(g.limit, float64(st.DailyLimit), slug)
		gauge(g.tier, tierValue[st.Tier], slug)
		gauge(g.backoff, st.PausedFor.Seconds(), slug)
		paused := 0.0
		if st.PausedReason != "" {
			paused = 1
		}
		gauge(g.paused, paused, slug)
		gauge(g.window, float64(st.InWindow), slug)
		gauge(g.ahead, float64(st.Ahead), slug)
		open := 0.0
		if st.Breaker == limiter.BreakerOpen || st.Breaker == limiter.BreakerHalf {
			open = 1
		}
		gauge(g.breaker, open, slug)
		for _, f := range models.Families {
			stopped := 0.0
			if slices.ContainsFunc(st.Stopped, func(s limiter.FamilyStop) bool { return s.Family == f }) {
				stopped = 1
			}
			gauge(g.stopped, stopped, slug, string(f))
		}
		gauge(g.backedOff, float64(st.BackedOff), slug)
	}
	ch <- prometheus.MustNewConstMetric(g.up, prometheus.GaugeValue, up)
}

func registerLimiterGauges(reg *prometheus.Registry, lim *limiter.Limiter, chs []models.ChannelConfig) error {
	if err := reg.Register(newLimiterGauges(lim, chs)); err != nil {
		return startupError{fmt.Errorf("limiter gauges: %w", err)}
	}
	return nil
}
