package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"github.com/paritysync/paritysync/activities/store"
	"github.com/paritysync/paritysync/models"
)

// fakeLag is a store whose parity lag is set by the test; nil fails the read.
type fakeLag []store.ParityLag

func (f fakeLag) ParityLag(context.Context, time.Duration, string) ([]store.ParityLag, error) {
	if f == nil {
		return nil, errors.New("postgres: connection refused")
	}
	return f, nil
}

func TestLagGaugesReportEveryChannelFromTheStore(t *testing.T) {
	chs := []models.ChannelConfig{models.NewChannelConfig("expedia", 60), models.NewChannelConfig("agoda", 60)}
	g := newLagGauges(fakeLag{{Channel: "expedia", Oldest: 90 * time.Second, Pending: 12, Acked: 40,
		P50: 1500 * time.Millisecond, P99: 20 * time.Second}}, chs)
	require.NoError(t, testutil.CollectAndCompare(g, strings.NewReader(`
# HELP paritysync_parity_lag_oldest_seconds Age of the oldest desired change not acknowledged yet: since its batch was accepted, while the batch still owes the channel updates.
# TYPE paritysync_parity_lag_oldest_seconds gauge
paritysync_parity_lag_oldest_seconds{channel="agoda"} 0
paritysync_parity_lag_oldest_seconds{channel="expedia"} 90
# HELP paritysync_parity_lag_seconds Time from a batch's acceptance to the channel's acknowledgement of its updates, over the last hour (at most 19 % high).
# TYPE paritysync_parity_lag_seconds gauge
paritysync_parity_lag_seconds{channel="agoda",quantile="0.5"} 0
paritysync_parity_lag_seconds{channel="agoda",quantile="0.99"} 0
paritysync_parity_lag_seconds{channel="expedia",quantile="0.5"} 1.5
paritysync_parity_lag_seconds{channel="expedia",quantile="0.99"} 20
# HELP paritysync_parity_lag_pending_updates Updates of open batches still without an outcome on the channel.
# TYPE paritysync_parity_lag_pending_updates gauge
paritysync_parity_lag_pending_updates{channel="agoda"} 0
paritysync_parity_lag_pending_updates{channel="expedia"} 12
# HELP paritysync_parity_lag_up 1 when the parity lag could be read from PostgreSQL at this scrape.
# TYPE paritysync_parity_lag_up gauge
paritysync_parity_lag_up 1
`), "paritysync_parity_lag_oldest_seconds", "paritysync_parity_lag_seconds", "paritysync_parity_lag_pending_updates",
		"paritysync_parity_lag_up"))
	// An unreadable store: no lag series, and lag_up says so.
	down := newLagGauges(fakeLag(nil), chs)
	require.Equal(t, 1, testutil.CollectAndCount(down))
}

// gaugeValue is the value of the sample of name whose labels include labels.
func gaugeValue(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) (float64, bool) {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metrics:
		for _, m := range mf.GetMetric() {
			for k, v := range labels {
				if !hasLabel(m, k, v) {
					continue metrics
				}
			}
			return m.GetGauge().GetValue(), true
		}
	}
	return 0, false
}

func hasLabel(m *dto.Metric, k, v string) bool {
	for _, l := range m.GetLabel() {
		if l.GetName() == k && l.GetValue() == v {
			return true
		}
	}
	return false
}

// While an operator pause holds a channel, its parity lag series exist and the age
// of the oldest change not acknowledged rises; after the resume the batch's updates
// are acknowledged, nothing is owed, and the acknowledgement quantiles carry the
// pause.
func TestEndToEndParityLagRisesWhileAChannelIsPaused(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: needs a Temporal dev server")
	}
	t.Parallel()
	srv := startDevServer(t)
	s := startStack(t, srv, map[string]int{"expedia": 120})
	ctx := context.Background()
	require.NoError(t, s.lim.Pause(ctx, "expedia", "rate dispute"))
	// Before anything was sent the series exist, at 0.
	oldest := func() float64 {
		v, ok := gaugeValue(t, s.metrics, "paritysync_parity_lag_oldest_seconds", map[string]string{"channel": "expedia"})
		require.True(t, ok, "the parity lag series of expedia exists")
		return v
	}
	require.Zero(t, oldest())

	run := s.startMutations(t, "lag-paused", rateChanges("expedia", 2, 3, 1, 3, "120.00"))
	var first float64
	require.Eventually(t, func() bool { first = oldest(); return first >= 1 }, 30*time.Second, 200*time.Millisecond,
		"the paused channel owes the batch's updates")
	time.Sleep(3 * time.Second)
	second := oldest()
	require.GreaterOrEqual(t, second, first+2.5, "the age rises while the channel is paused")
	pending, _ := gaugeValue(t, s.metrics, "paritysync_parity_lag_pending_updates", map[string]string{"channel": "expedia"})
	require.Equal(t, 6.0, pending, "every update is owed")
	t.Logf("paused: oldest %.1f s, then %.1f s; %v updates owed", first, second, pending)

	require.NoError(t, s.lim.Resume(ctx, "expedia"))
	// The lanes wait out the limiter pause with a poll timer; a resume signal
	// wakes them at once (as starter channel resume sends).
	require.NoError(t, s.tc.SignalWorkflow(ctx, models.BatchWorkflowID("lag-paused"), "", models.SignalResumeChannel,
		models.PauseSignal{Channel: "expedia"}))
	var st models.BatchStatus
	wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	require.NoError(t, run.Get(wctx, &st))
	require.Equal(t, 6, st.Totals().Committed, fmt.Sprintf("%+v", st))
	require.Zero(t, oldest(), "nothing is owed once every update has its outcome")
	p50, _ := gaugeValue(t, s.metrics, "paritysync_parity_lag_seconds", map[string]string{"channel": "expedia", "quantile": "0.5"})
	acked, _ := gaugeValue(t, s.metrics, "paritysync_parity_lag_acked_updates", map[string]string{"channel": "expedia"})
	require.Equal(t, 6.0, acked)
	require.GreaterOrEqual(t, p50, second, "the acknowledgements came after the pause")
	t.Logf("after the resume: p50 %.1f s over %v acknowledged updates", p50, acked)
}
