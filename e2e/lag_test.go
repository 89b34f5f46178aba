package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"github.com/paritysync/paritysync/models"
)

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
	srv := parallelDevServer(t)
	s := startStack(t, srv, map[string]int{"expedia": 120})
	ctx := context.Background()
	require.NoError(t, s.Lim.Pause(ctx, "expedia", "rate dispute"))
	// Before anything was sent the series exist, at 0.
	oldest := func() float64 {
		v, ok := gaugeValue(t, s.Metrics, "paritysync_parity_lag_oldest_seconds", map[string]string{"channel": "expedia"})
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
	pending, _ := gaugeValue(t, s.Metrics, "paritysync_parity_lag_pending_updates", map[string]string{"channel": "expedia"})
	require.Equal(t, 6.0, pending, "every update is owed")
	t.Logf("paused: oldest %.1f s, then %.1f s; %v updates owed", first, second, pending)

	require.NoError(t, s.Lim.Resume(ctx, "expedia"))
	// The lanes wait out the limiter pause with a poll timer; a resume signal
	// wakes them at once (as starter channel resume sends).
	require.NoError(t, s.TC.SignalWorkflow(ctx, models.BatchWorkflowID("lag-paused"), "", models.SignalResumeChannel,
		models.PauseSignal{Channel: "expedia"}))
	var st models.BatchStatus
	wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	require.NoError(t, run.Get(wctx, &st))
	require.Equal(t, 6, st.Totals().Committed, fmt.Sprintf("%+v", st))
	require.Zero(t, oldest(), "nothing is owed once every update has its outcome")
	p50, _ := gaugeValue(t, s.Metrics, "paritysync_parity_lag_seconds", map[string]string{"channel": "expedia", "quantile": "0.5"})
	acked, _ := gaugeValue(t, s.Metrics, "paritysync_parity_lag_acked_updates", map[string]string{"channel": "expedia"})
	require.Equal(t, 6.0, acked)
	require.GreaterOrEqual(t, p50, second, "the acknowledgements came after the pause")
	t.Logf("after the resume: p50 %.1f s over %v acknowledged updates", p50, acked)
}
