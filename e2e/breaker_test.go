package e2e

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/shopspring/decimal"
	"github.com/stretchr/testify/require"

	"github.com/paritysync/paritysync/e2e/stack"
	"github.com/paritysync/paritysync/limiter"
	"github.com/paritysync/paritysync/models"
	"github.com/paritysync/paritysync/otasim/sim"
)

// TestCircuitBreakerStopsEveryWorker answers every push with a 5xx for 12 s while a
// batch runs on three workers: the channel's breaker opens after its streak, every
// worker stops calling, one probe per cool-down tests the channel, and when the
// channel recovers the breaker closes and every update gets an outcome.
func TestCircuitBreakerStopsEveryWorker(t *testing.T) {
	srv := parallelDevServer(t)
	const failures, cooldown = 5, 3 * time.Second
	s := startStackWith(t, srv, stack.Options{Workers: 3,
		Channels: map[string]stack.Channel{"agoda": {PerMinute: 600, Burst: 20, MaxLines: 1}},
		Env: map[string]string{
			"PARITYSYNC_CHANNEL_AGODA_BREAKER_FAILURES": fmt.Sprint(failures),
			"PARITYSYNC_CHANNEL_AGODA_BREAKER_COOLDOWN": cooldown.String(),
		}})
	require.NoError(t, s.Sim.SetFaults(sim.Faults{Channels: []string{"agoda"}, ErrorRatio: 1}))
	day := models.DateOf(time.Now()).AddDays(5)
	var ms []models.Mutation
	for i := range 40 {
		a := decimal.New(int64(100+i), 0)
		ms = append(ms, models.Mutation{ID: uuid.NewString(), Channel: "agoda", PropertyID: fmt.Sprintf("prop_%08x", i+1),
			RoomTypeCode: "DBL", RatePlanCode: "BAR", StayDate: day, Values: models.Values{Amount: &a, Currency: "EUR"},
			Version: time.Now().Unix(), Priority: 3})
	}
	start := time.Now()
	run := s.startMutations(t, "breaker-"+uuid.NewString()[:8], ms)
	// The streak completes once the first pushes have run, which on a loaded machine
	// (the end-to-end tests run side by side) takes longer than on an idle one; the
	// outage then lasts three cool-downs, for the probes.
	require.Eventually(t, func() bool {
		st, err := s.Lim.Status(context.Background(), "agoda")
		return err == nil && st.Breaker != limiter.BreakerClosed
	}, time.Minute, 100*time.Millisecond, "the breaker opens during the outage")
	time.Sleep(3 * cooldown)
	st, err := s.Lim.Status(context.Background(), "agoda")
	require.NoError(t, err)
	require.NotEqual(t, limiter.BreakerClosed, st.Breaker, "the breaker is open during the outage")
	require.NoError(t, s.Sim.SetFaults(sim.Faults{}))
	recovered := time.Now()
	done := waitBatch(t, run, 5*time.Minute)

	var failed []time.Duration
	for _, r := range s.Sim.Requests("agoda", start) {
		if r.At.Before(recovered) {
			failed = append(failed, r.At.Sub(start))
		}
	}
	slices.Sort(failed)
	// The calls before the breaker opened are those before the first pause as long
	// as most of a cool-down; after it, one probe per cool-down.
	opened := len(failed)
	for i := 1; i < len(failed); i++ {
		if failed[i]-failed[i-1] > cooldown*8/10 {
			opened = i
			break
		}
	}
	probes := len(failed) - opened
	tot := done.Totals()
	t.Logf("outage of %s on 3 workers: %d calls before the breaker opened (streak %d), %d probes after (cool-down %s); after recovery: %+v",
		recovered.Sub(start).Round(time.Second), opened, failures, probes, cooldown, tot)
	require.LessOrEqual(t, opened, failures+12, "the lanes in flight when the streak completes, no more")
	maxProbes := int(recovered.Sub(start)/cooldown) + 1
	require.LessOrEqual(t, probes, maxProbes, "one probe per cool-down")
	require.Equal(t, len(ms), tot.Done(), "every update has an outcome")
	require.Positive(t, tot.Committed)
	st, err = s.Lim.Status(context.Background(), "agoda")
	require.NoError(t, err)
	require.Equal(t, limiter.BreakerClosed, st.Breaker, "closed on recovery")
}
