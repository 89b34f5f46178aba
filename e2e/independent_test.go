package e2e

import (
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/paritysync/paritysync/e2e/stack"
	"github.com/paritysync/paritysync/models"
)

// independent is the independent check of the push engine, as it will be run: a
// private stack per part, its channel declared in a channels file on the generic
// paritysync protocol, as an operator adds a channel of their own.
//
//  1. One per-property channel (10/min, burst 2, scope property, one line a
//     request) and one batch of 50 properties × 12 nights: the batch must finish
//     within 2.5 × the minimum the channel's windows allow, with 0 429s and no
//     property over 10 in any 60 s.
//  2. A 30/min channel (scope channel): 40 bulk changes through the burst
//     smoother, then 5 s later a priority-1 stop-sell for another property; it
//     must reach the channel within 10 s.
//
// Part 1 runs twice: at the default priority (a batch that names none) and as bulk
// (priority 5, which never takes the burst), since the check names no priority.
func (b *bench) independent() {
	b.independentWindows(models.PriorityDefault)
	b.independentWindows(5)
	b.independentSmoother()
}

// independentChannel is a channels file declaring one channel on the generic
// protocol with the given fields (YAML lines, indented under the entry).
func (b *bench) independentChannel(slug string, fields ...string) string {
	var y string
	for _, f := range fields {
		y += "    " + f + "\n"
	}
	return stack.WriteFile(b.t, b.t.TempDir(), "channels.yaml",
		"channels:\n  - slug: "+slug+"\n    protocol: paritysync\n"+y)
}

// independentWindows is part 1 of the independent check, the batch at priority.
func (b *bench) independentWindows(priority int) {
	const slug, rate, burst, props, nights = "generic_property", 10, 2, 50, 12
	s := b.stack(stack.Options{Env: map[string]string{"PARITYSYNC_CHANNELS_FILE": b.independentChannel(slug,
		fmt.Sprintf("rate_per_minute: %d", rate), fmt.Sprintf("burst: %d", burst),
		"scope: property", "max_lines_per_request: 1")}})
	cfg := s.Acts.Channels[slug]
	require.Equal(b.t, models.ProtocolParitySync, cfg.Protocol)
	require.Equal(b.t, models.ScopeProperty, cfg.Scope)
	require.Equal(b.t, [3]int{rate, burst, 1}, [3]int{cfg.RatePerMinute, cfg.Burst, cfg.MaxLinesPerRequest})
	require.Equal(b.t, time.Minute, cfg.WindowLength())

	// The minimum the windows allow. The channel counts per property, so every
	// property's 12 requests may go in parallel, and the batch's minimum is one
	// property's: the earliest-slot schedule of at most rate requests in any 60 s
	// window and at most burst back to back at a pace of 60 s / rate
	// (minimumMakespan). Request k (1-based) of a property may go at
	//	t_k = max(pace·(k − burst), 0, t_(k−rate) + 60 s),  pace = 6 s:
	// k = 1…10 at 0, 0, 6, …, 48 s (pace and burst), k = 11 and 12 at
	// max(54, 0 + 60) = 60 s and max(60, 0 + 60) = 60 s (the window). So the last
	// request may go 60 s after the first: the window binds, not the pace. The
	// limiter's own schedule is a little stricter (it counts in windows widened by
	// its 500 ms margin: 60.5 s), but the check measures against the channel's.
	minimum := minimumMakespan(nights, rate, burst)
	require.Equal(b.t, time.Minute, minimum)

	// Bulk work (priority 4 and 5) leaves the burst to urgent work, so its own
	// best is one pace later: 12 requests 6.05 s apart, 66.6 s.
	ms := rateChanges(slug, props, nights, time.Now().Unix(), priority, "120.00")
	id := "bench-indep-" + uuid.NewString()[:8]
	start := time.Now()
	st := waitBatch(b.t, b.startBig(s, s.Queue, id, ms), 15*time.Minute)
	done := time.Since(start)
	require.Equal(b.t, props*nights, st.Totals().Committed)

	// The batch's last commit is the channel's acceptance of its last request; the
	// per-property windows are counted on the simulator's own log of what arrived.
	var first, last time.Time
	accepted := 0
	perProp := map[string][]time.Time{}
	for _, r := range s.Sim.Requests(slug, time.Time{}) {
		if r.Family == "" {
			continue
		}
		perProp[r.Property] = append(perProp[r.Property], r.At)
		if first.IsZero() || r.At.Before(first) {
			first = r.At
		}
		if r.Status == http.StatusOK {
			accepted++
			last = maxTime(last, r.At)
		}
	}
	require.Equal(b.t, props*nights, accepted, "one request per night")
	most := 0
	for _, ts := range perProp {
		most = max(most, mostInWindow(ts))
	}
	span := last.Sub(start)
	b.row(fmt.Sprintf("independent check 1: one batch, %d properties × %d nights (one request a night) at priority %d, generic protocol, per-property %d/min burst %d",
		props, nights, priority, rate, burst),
		fmt.Sprintf("batch start → last commit %.1f s = %.2f × minimum %.0f s (first push at %.1f s, batch done at %.1f s); %d 429s; most for one property in any 60 s %d",
			span.Seconds(), float64(span)/float64(minimum), minimum.Seconds(), first.Sub(start).Seconds(), done.Seconds(),
			s.Sim.Stats()[slug].Throttled, most),
		"≤ 2.5 × minimum; 0; ≤ 10")
}

// independentSmoother is part 2 of the independent check. The check posts one
// stop-sell 5 s after the bulk changes; this posts 4 more, 10 s apart, while the
// bulk batch still saturates the channel, and reports the first and the worst.
func (b *bench) independentSmoother() {
	const slug, rate, nBulk, nUrgent = "generic_channel", 30, 40, 5
	// The channel's other limits are its defaults (burst a tenth of the rate, at
	// least 2): the check names only the rate.
	s := b.stack(stack.Options{Env: map[string]string{"PARITYSYNC_CHANNELS_FILE": b.independentChannel(slug,
		fmt.Sprintf("rate_per_minute: %d", rate), "scope: channel")}})
	cfg := s.Acts.Channels[slug]
	require.Equal(b.t, models.ProtocolParitySync, cfg.Protocol)
	require.Equal(b.t, models.ScopeChannel, cfg.Scope)
	r := b.smoothedStopSells(s, slug, nBulk, nUrgent)
	b.row(fmt.Sprintf("independent check 2: a stop-sell (priority 1) through the smoother 5 s after %d smoothed bulk changes, generic protocol, %d/min burst %d, scope channel (then %d more, 10 s apart)",
		nBulk, rate, cfg.Burst, nUrgent-1),
		fmt.Sprintf("post → channel %.2f s; all %d: p50 %.2f s, max %.2f s (%d bulk requests after the last); %d 429s; max in 60 s %d",
			r.latencies[0].Seconds(), nUrgent, percentile(r.latencies, .5).Seconds(), slices.Max(r.latencies).Seconds(),
			r.behind, r.throttled, mostInWindow(r.arrivals)),
		fmt.Sprintf("≤ 10 s (each); 0; ≤ %d", rate))
}

// maxTime is the later of a and b.
func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
