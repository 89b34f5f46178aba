package app

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/paritysync/paritysync/activities/store"
	"github.com/paritysync/paritysync/models"
)

// lagWindow is the window of the acknowledgement quantiles.
const lagWindow = time.Hour

// lagReader is the part of the store the parity-lag gauges read.
type lagReader interface {
	ParityLag(ctx context.Context, window time.Duration, property string) ([]store.ParityLag, error)
}

// lagGauges read every channel's parity lag from PostgreSQL at scrape time: the
// system of record's view, the same from every worker (dashboards and alerts take
// the max over instances). Channels with nothing owed and nothing acknowledged in
// the window read 0, so each configured channel has its series.
type lagGauges struct {
	st       lagReader
	channels []string
	timeout  time.Duration

	up, oldest, pending, quantile, acked *prometheus.Desc
}

func newLagGauges(st lagReader, chs []models.ChannelConfig) *lagGauges {
	return &lagGauges{st: st, channels: slugs(chs), timeout: 2 * time.Second,
		up: prometheus.NewDesc("paritysync_parity_lag_up",
			"1 when the parity lag could be read from PostgreSQL at this scrape.", nil, nil),
		oldest: prometheus.NewDesc("paritysync_parity_lag_oldest_seconds",
			"Age of the oldest desired change not acknowledged yet: since its batch was accepted, while the batch still owes the channel updates.",
			[]string{"channel"}, nil),
		pending: prometheus.NewDesc("paritysync_parity_lag_pending_updates",
			"Updates of open batches still without an outcome on the channel.", []string{"channel"}, nil),
		quantile: prometheus.NewDesc("paritysync_parity_lag_seconds",
			"Time from a batch's acceptance to the channel's acknowledgement of its updates, over the last hour (at most 19 % high).",
			[]string{"channel", "quantile"}, nil),
		acked: prometheus.NewDesc("paritysync_parity_lag_acked_updates",
			"Updates the channel acknowledged over the last hour (the quantiles' sample).", []string{"channel"}, nil),
	}
}

// Describe implements prometheus.Collector.
func (g *lagGauges) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{g.up, g.oldest, g.pending, g.quantile, g.acked} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (g *lagGauges) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), g.timeout)
	defer cancel()
	lags, err := g.st.ParityLag(ctx, lagWindow, "")
	if err != nil {
		slog.Warn("parity lag gauges", "error", err)
		ch <- prometheus.MustNewConstMetric(g.up, prometheus.GaugeValue, 0)
		return
	}
	by := map[string]store.ParityLag{}
	for _, l := range lags {
		by[l.Channel] = l
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	for _, slug := range g.channels {
		l := by[slug]
		gauge(g.oldest, l.Oldest.Seconds(), slug)
		gauge(g.pending, float64(l.Pending), slug)
		gauge(g.quantile, l.P50.Seconds(), slug, "0.5")
		gauge(g.quantile, l.P99.Seconds(), slug, "0.99")
		gauge(g.acked, float64(l.Acked), slug)
	}
	gauge(g.up, 1)
}

func registerLagGauges(reg *prometheus.Registry, st *store.Store, chs []models.ChannelConfig) error {
	if err := reg.Register(newLagGauges(st, chs)); err != nil {
		return startupError{fmt.Errorf("parity lag gauges: %w", err)}
	}
	return nil
}
