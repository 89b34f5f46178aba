package e2e

import (
	"context"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/shopspring/decimal"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"

	"github.com/paritysync/paritysync/models"
	"github.com/paritysync/paritysync/ops"
	"github.com/paritysync/paritysync/otasim/sample"
	"github.com/paritysync/paritysync/otasim/sim"
	"github.com/paritysync/paritysync/worker/app/metricstest"
)

// TestEndToEnd runs the whole path on real parts: a Temporal dev server (the CLI
// binary `make test` builds into .bin/), the real Redis at REDIS_URL, the
// simulator over real HTTP and the worker's fx application.
func TestEndToEnd(t *testing.T) {
	srv := parallelDevServer(t)
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
		for slug, cs := range s.Sim.Stats() {
			t.Logf("%s: %+v", slug, cs)
			require.Zero(t, cs.Throttled, "%s saw 429s", slug)
			require.LessOrEqual(t, cs.MaxWindowRequests, cs.Limit, "%s over its limit in one window", slug)
			require.Zero(t, cs.StaleOverwrites, slug)
		}
		recordHistories(t, s.TC, st.BatchID)
	})

	t.Run("429 storm: deferred, then everything committed", func(t *testing.T) {
		before := s.Sim.Stats()
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
		// Counted from the first push: the batch may take longer than the storm to
		// reach a channel on a loaded machine.
		require.NoError(t, s.Sim.SetFaults(sim.Faults{StormSeconds: 8, StormStatus: 429, StormFromFirstPush: true}))
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
		for slug, cs := range s.Sim.Stats() {
			throttled += cs.Throttled - before[slug].Throttled
		}
		require.Positive(t, throttled, "the simulator answered 429 during the storm")
		if recording() {
			// The child with the longest history: several lanes, held slots and the
			// storm's 429 waits.
			writeLongestChild(t, s.TC, st.BatchID, "channelsync_storm.json")
		}
	})

	t.Run("silent drift: reconciliation finds it and repairs it", func(t *testing.T) {
		// agoda acknowledges these new prices without applying them.
		drifting := newPrices(ms, v, "agoda", 20, 2)
		require.NoError(t, s.Sim.SetFaults(sim.Faults{Channels: []string{"agoda"}, DriftRatio: 1}))
		st := s.runBatch(t, "e2e-drift-"+uuid.NewString()[:8], drifting)
		require.Equal(t, len(drifting), st.Totals().Committed, "the channel said yes to every line")
		require.NoError(t, s.Sim.SetFaults(sim.Faults{}))

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
			writeHistory(t, s.TC, reconcileID, "reconcile.json")
		}
	})

	t.Run("burst smoother: a storm of small submits becomes few batches", func(t *testing.T) {
		burst := newPrices(ms, v, "expedia", 60, 3)
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		for i := 0; i < len(burst); i += 5 {
			res, err := ops.Submit(ctx, s.TC, s.Queue, s.Acts.Store, models.SmootherInput{Channel: "expedia"}, burst[i:i+5])
			require.NoError(t, err)
			require.Equal(t, 5, res.Accepted)
		}
		var st models.SmootherStatus
		require.Eventually(t, func() bool {
			v, err := s.TC.QueryWorkflow(ctx, models.SmootherWorkflowID("expedia"), "", models.QueryStatus)
			return err == nil && v.Get(&st) == nil && st.Pending == 0 && st.Totals.Done() == len(burst)
		}, 2*time.Minute, 500*time.Millisecond)
		t.Logf("smoother: %+v", st)
		require.Equal(t, len(burst), st.Totals.Committed)
		require.Less(t, st.Flushed, 12/2, "12 submits gathered into a few batches")
		require.NoError(t, s.TC.TerminateWorkflow(ctx, models.SmootherWorkflowID("expedia"), "", "end of test"))
		if recording() {
			writeHistory(t, s.TC, models.SmootherWorkflowID("expedia"), "smoother.json")
		}
	})

	t.Run("burst smoother: a refused submit reaches the client as SmootherFull", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		submit := func(ms []models.Mutation) error {
			_, err := ops.Submit(ctx, s.TC, s.Queue, s.Acts.Store,
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
		require.NoError(t, s.TC.TerminateWorkflow(ctx, models.SmootherWorkflowID("booking_com"), "", "end of test"))
		if recording() {
			writeHistory(t, s.TC, models.SmootherWorkflowID("booking_com"), "smoother_refused.json")
		}
	})

	t.Run("metrics: after the batches, /metrics has every series the dashboard and alerts query", func(t *testing.T) {
		srv := httptest.NewServer(promhttp.HandlerFor(s.Metrics, promhttp.HandlerOpts{}))
		defer srv.Close()
		scraped := metricstest.ScrapedNames(t, srv.URL+"/metrics")
		var sdk []string
		for n := range scraped {
			if strings.HasPrefix(n, "temporal_") {
				sdk = append(sdk, n)
			}
		}
		slices.Sort(sdk)
		t.Logf("scrape: %d series names, %d from the Temporal SDK: %s", len(scraped), len(sdk), strings.Join(sdk, " "))
		require.NotEmpty(t, sdk, "the Temporal SDK's metrics share /metrics")
		metricstest.RequireQueriedIn(t, scraped)
	})
}
