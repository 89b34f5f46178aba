package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"net/http"
	"os"
	"os/exec"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/google/uuid"
	"github.com/shopspring/decimal"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	sdkworker "go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/paritysync/paritysync/channels"
	"github.com/paritysync/paritysync/config"
	"github.com/paritysync/paritysync/dial/devtest"
	"github.com/paritysync/paritysync/e2e/stack"
	"github.com/paritysync/paritysync/models"
	"github.com/paritysync/paritysync/ops"
	"github.com/paritysync/paritysync/otasim/sample"
	"github.com/paritysync/paritysync/otasim/sim"
	"github.com/paritysync/paritysync/workflows"
)

// TestBenchPushEngine runs the push engine's benchmark scenarios end to end on a real
// dev server, the real Redis and the simulator, and prints one table. It is a
// measurement, not a unit test: it runs only with PARITYSYNC_BENCH set (to "all" or
// a comma-separated list of scenario names), e.g.
//
//	PARITYSYNC_BENCH=all go test -run TestBenchPushEngine -v -timeout 90m ./e2e
//
// `make bench-e2e` does exactly that. PARITYSYNC_BENCH_OUT names a file that gets the
// table too.
func TestBenchPushEngine(t *testing.T) {
	sel := os.Getenv("PARITYSYNC_BENCH")
	if sel == "" {
		t.Skip("set PARITYSYNC_BENCH=all (or a list of scenarios) to run the push engine benchmark")
	}
	srv := startDevServer(t)
	b := &bench{t: t, srv: srv}
	scenarios := []struct {
		name string
		run  func()
	}{
		{"saturated", b.saturated},
		{"urgent", b.urgent},
		{"smoother-urgent", b.smootherUrgent},
		{"turns", b.turns},
		{"race", b.race},
		{"cost", b.cost},
		{"pause", b.pause},
		{"throughput", b.throughput},
		{"versus", b.versus},
		{"perproperty", b.perProperty},
		{"independent", b.independent},
		{"trace", b.trace},
	}
	for _, sc := range scenarios {
		if !selected(sel, sc.name) {
			continue
		}
		t.Run(sc.name, func(t *testing.T) {
			b.t = t
			sc.run()
		})
	}
	report(t, "PARITYSYNC_BENCH_OUT", [3]string{"scenario", "measured", "target"}, b.rows)
}

// selected reports whether a scenario is among sel ("all", or a comma-separated
// list of names).
func selected(sel, name string) bool {
	return sel == "all" || slices.Contains(strings.Split(sel, ","), name)
}

// report prints a table of three columns to stdout and, when the environment
// variable outEnv names a file, to that file too.
func report(t *testing.T, outEnv string, header [3]string, rows [][3]string) {
	t.Helper()
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "| %s\t| %s\t| %s\t|\n", header[0], header[1], header[2])
	fmt.Fprintln(tw, "|---\t|---\t|---\t|")
	for _, r := range rows {
		fmt.Fprintf(tw, "| %s\t| %s\t| %s\t|\n", r[0], r[1], r[2])
	}
	_ = tw.Flush()
	fmt.Print(b.String())
	if out := os.Getenv(outEnv); out != "" {
		require.NoError(t, os.WriteFile(out, []byte(b.String()), 0o644))
	}
}

type bench struct {
	t   *testing.T
	srv *devtest.Env
	// newStack, when set, starts the scenarios' stacks on another topology (the
	// production one of prod_test.go) instead of srv.
	newStack func(t *testing.T, o stack.Options) *e2eStack
	mu       sync.Mutex
	rows     [][3]string // scenario, measured, target
}

// stack starts a stack with the worker's default chunk size (the end-to-end tests
// use small chunks to exercise many children; a benchmark measures the product).
func (b *bench) stack(o stack.Options) *e2eStack {
	env := map[string]string{"PARITYSYNC_CHUNK_SIZE": fmt.Sprint(config.DefaultSettings().ChunkSize)}
	maps.Copy(env, o.Env)
	o.Env = env
	// One stack at a time: the worker sizes its pool as in production.
	o.PoolConns = -1
	if b.newStack != nil {
		return b.newStack(b.t, o)
	}
	return startStackWith(b.t, b.srv, o)
}

func (b *bench) row(scenario, measured, target string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.rows = append(b.rows, [3]string{scenario, measured, target})
	b.t.Logf("%s: %s (target %s)", scenario, measured, target)
}

// arrivals are the times the simulator saw valid pushes to channel (any status).
func arrivals(s *e2eStack, channel string, keep func(sim.RequestRecord) bool) []time.Time {
	var out []time.Time
	for _, r := range s.Sim.Requests(channel, time.Time{}) {
		if r.Family != "" && (keep == nil || keep(r)) {
			out = append(out, r.At)
		}
	}
	return out
}

// mostInWindow is the most arrivals in any 60 s window.
func mostInWindow(ts []time.Time) int { return models.MostInWindowAt(ts, time.Minute) }

// minimumMakespan is the shortest time from the first to the last of n requests
// that the declared limit allows: at most rate in any 60 s window, at most burst
// back to back at a pace of 60 s / rate (the earliest-slot schedule is optimal).
func minimumMakespan(n, rate, burst int) time.Duration {
	interval := float64(time.Minute) / float64(rate)
	tau := float64(burst-1) * interval
	var slots []float64
	tat := 0.0
	for range n {
		t := math.Max(0, tat-tau)
		if len(slots) >= rate {
			t = math.Max(t, slots[len(slots)-rate]+float64(time.Minute))
		}
		slots = append(slots, t)
		tat = math.Max(tat, t) + interval
	}
	return time.Duration(slots[n-1])
}

// windowUse is the mean, over the 60 s windows that start at an arrival and end
// before the last one (the saturated part of a run), of arrivals / limit.
func windowUse(ts []time.Time, limit int) float64 {
	s := slices.Clone(ts)
	slices.SortFunc(s, func(a, b time.Time) int { return a.Compare(b) })
	sum, n := 0.0, 0
	for i := range s {
		end := s[i].Add(time.Minute)
		if end.After(s[len(s)-1]) {
			break
		}
		c := 0
		for j := i; j < len(s) && s[j].Before(end); j++ {
			c++
		}
		sum += float64(c) / float64(limit)
		n++
	}
	if n == 0 {
		return 0
	}
	return sum / float64(n)
}

func (b *bench) saturated() {
	for _, workers := range []int{1, 3} {
		b.saturatedWith(workers)
	}
}

// saturatedWith is the saturated scenario with the given number of workers.
func (b *bench) saturatedWith(workers int) {
	const rate, burst, n = 30, 3, 54
	s := b.stack(stack.Options{Workers: workers,
		Channels: map[string]stack.Channel{"expedia": {PerMinute: rate, Burst: burst, MaxLines: 1}}})
	// 54 properties, one night each: 54 one-line rates requests at the default
	// priority (bulk work, priority 4 and 5, leaves the burst to urgent work).
	ms := rateChanges("expedia", n, 1, time.Now().Unix(), models.PriorityDefault, "120.00")
	st := waitBatch(b.t, s.startMutations(b.t, "bench-sat-"+uuid.NewString()[:8], ms), 15*time.Minute)
	require.Equal(b.t, n, st.Totals().Committed)
	ts := arrivals(s, "expedia", nil)
	slices.SortFunc(ts, func(a, b time.Time) int { return a.Compare(b) })
	span := ts[len(ts)-1].Sub(ts[0])
	minimum := minimumMakespan(n, rate, burst)
	stats := s.Sim.Stats()["expedia"]
	b.row(fmt.Sprintf("saturated expedia 30/min, %d requests, %d worker(s)", n, workers),
		fmt.Sprintf("window use %.3f; makespan %.1f s = %.3f × minimum %.1f s; %d 429s; max in 60 s %d",
			windowUse(ts, rate), span.Seconds(), float64(span)/float64(minimum), minimum.Seconds(),
			stats.Throttled, mostInWindow(ts)),
		"≥ 0.97; ≤ 1.03 × minimum; 0; ≤ 30")
}

// latencies are, per mutation id, the time from start to the channel's arrival of
// the request carrying it (matched by property).
func percentile(ds []time.Duration, p float64) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(math.Ceil(p*float64(len(s)))) - 1
	return s[max(0, min(i, len(s)-1))]
}

// changeLatencies starts each change as its own batch every gap and returns, per
// change, the time from its start to the simulator's arrival of its property's
// request in its family.
func (b *bench) changeLatencies(s *e2eStack, channel string, changes []models.Mutation, gap time.Duration, fam models.Family) []time.Duration {
	starts := map[string]time.Time{}
	var runs []client.WorkflowRun
	for _, m := range changes {
		starts[m.PropertyID] = time.Now()
		runs = append(runs, s.startMutations(b.t, "bench-chg-"+uuid.NewString()[:8], []models.Mutation{m}))
		time.Sleep(gap)
	}
	for _, r := range runs {
		st := waitBatch(b.t, r, 10*time.Minute)
		require.Equal(b.t, 1, st.Totals().Done())
	}
	var out []time.Duration
	for _, r := range s.Sim.Requests(channel, time.Time{}) {
		if start, ok := starts[r.Property]; ok && r.Family == fam {
			out = append(out, r.At.Sub(start))
			delete(starts, r.Property)
		}
	}
	require.Empty(b.t, starts, "every change reached the channel")
	return out
}

func (b *bench) urgent() {
	const rate = 60
	s := b.stack(stack.Options{
		Channels: map[string]stack.Channel{"booking_com": {PerMinute: rate, Burst: 6, MaxLines: 1}}})
	bulk := rateChanges("booking_com", 150, 1, time.Now().Unix(), 5, "99.00")
	run := s.startMutations(b.t, "bench-bulk-"+uuid.NewString()[:8], bulk)
	time.Sleep(20 * time.Second) // saturated by now
	var stops []models.Mutation
	for i := range 20 {
		stop := true
		stops = append(stops, models.Mutation{ID: uuid.NewString(), Channel: "booking_com",
			PropertyID: fmt.Sprintf("prop_%08x", 0xa000+i), RoomTypeCode: "DBL", RatePlanCode: "BAR",
			StayDate: benchDay(), Values: models.Values{StopSell: &stop}, Version: time.Now().UnixNano(), Priority: models.PriorityUrgent})
	}
	lat := b.changeLatencies(s, "booking_com", stops, 3*time.Second, models.FamilyRestrictions)
	b.t.Logf("stop-sell latencies: %v", lat)
	saturatedAt := mostInWindow(arrivals(s, "booking_com", nil))
	_ = s.TC.TerminateWorkflow(context.Background(), run.GetID(), "", "end of benchmark")
	b.row("20 stop-sells (priority 1) under a saturating bulk batch, booking_com 60/min",
		fmt.Sprintf("p50 %.2f s, p99 %.2f s, max %.2f s (token interval 1 s; max in 60 s %d)",
			percentile(lat, .5).Seconds(), percentile(lat, .99).Seconds(), percentile(lat, 1).Seconds(), saturatedAt),
		"p99 ≤ 2 token intervals + timer lateness")
}

// smootherUrgent is webhook traffic on one channel (expedia at 30/min, burst 3,
// channel scope): 40 bulk rate changes (priority 5) handed to the channel's burst
// smoother as POST /v1/changes hands them (ops.Submit, with intake's smoother
// input), then, from 5 s later, 5 stop-sells (priority 1, each another property)
// the same way, 10 s apart, while the bulk batch keeps the channel saturated. It
// reports each stop-sell's post → channel latency: from its submit to the
// simulator's arrival of its property's restrictions request.
func (b *bench) smootherUrgent() {
	const rate, burst, nBulk, nUrgent = 30, 3, 40, 5
	s := b.stack(stack.Options{Env: map[string]string{"PARITYSYNC_CHANNEL_EXPEDIA_SCOPE": string(models.ScopeChannel)},
		Channels: map[string]stack.Channel{"expedia": {PerMinute: rate, Burst: burst, MaxLines: 1}}})
	r := b.smoothedStopSells(s, "expedia", nBulk, nUrgent)
	lat := r.latencies
	interval := time.Minute / rate
	b.row(fmt.Sprintf("%d stop-sells (priority 1) through the smoother, from 5 s after %d smoothed bulk changes, 10 s apart, expedia %d/min burst %d",
		nUrgent, nBulk, rate, burst),
		fmt.Sprintf("post → channel p50 %.2f s, p99 %.2f s, max %.2f s (token interval %.0f s; %d bulk requests after the last); %d 429s; max in 60 s %d",
			percentile(lat, .5).Seconds(), percentile(lat, .99).Seconds(), percentile(lat, 1).Seconds(), interval.Seconds(),
			r.behind, r.throttled, mostInWindow(r.arrivals)),
		"p99 ≤ 2 token intervals + 1 s debounce (5 s); independent check: ≤ 10 s; 0; ≤ 30")
}

// stopSellRun is what smoothedStopSells measured.
type stopSellRun struct {
	// latencies are the stop-sells' post → channel times, in the order posted.
	latencies []time.Duration
	// behind is how many requests reached the channel after the last stop-sell
	// (the bulk batch still saturating it then); throttled the channel's 429s.
	behind, throttled int
	// arrivals are every push the channel saw.
	arrivals []time.Time
}

// smoothedStopSells hands nBulk bulk rate changes (priority 5, one night each of
// as many properties) to channel's burst smoother as POST /v1/changes hands them
// (ops.Submit, with intake's smoother input), then, from 5 s later, nUrgent
// stop-sells (priority 1, each another property) the same way, 10 s apart, and
// measures each stop-sell's post → channel latency: from its submit to the
// simulator's arrival of its property's restrictions request. It waits for the
// smoother to drain, then stops it.
func (b *bench) smoothedStopSells(s *e2eStack, channel string, nBulk, nUrgent int) stopSellRun {
	ctx := context.Background()
	in := models.SmootherInput{Channel: channel, MaxPending: models.DefaultMaxPending}
	submit := func(ms []models.Mutation) {
		res, err := ops.Submit(ctx, s.TC, s.Queue, s.Acts.Store, in, ms)
		require.NoError(b.t, err)
		require.Equal(b.t, len(ms), res.Accepted)
	}
	submit(rateChanges(channel, nBulk, 1, time.Now().Unix(), 5, "99.00"))
	posted := map[string]time.Time{}
	var order []string
	time.Sleep(5 * time.Second)
	for i := range nUrgent {
		if i > 0 {
			time.Sleep(10 * time.Second)
		}
		stop := true
		m := models.Mutation{ID: uuid.NewString(), Channel: channel,
			PropertyID: fmt.Sprintf("prop_%08x", 0xd000+i), RoomTypeCode: "DBL", RatePlanCode: "BAR",
			StayDate: benchDay(), Values: models.Values{StopSell: &stop}, Version: time.Now().UnixNano(), Priority: models.PriorityUrgent}
		posted[m.PropertyID] = time.Now()
		order = append(order, m.PropertyID)
		submit([]models.Mutation{m})
	}
	arrived := map[string]time.Time{}
	require.Eventually(b.t, func() bool {
		for _, r := range s.Sim.Requests(channel, time.Time{}) {
			if _, ok := posted[r.Property]; ok && r.Family == models.FamilyRestrictions {
				if _, seen := arrived[r.Property]; !seen {
					arrived[r.Property] = r.At
				}
			}
		}
		return len(arrived) == nUrgent
	}, 5*time.Minute, 100*time.Millisecond, "every stop-sell reached the channel")
	var out stopSellRun
	var last time.Time
	for _, p := range order {
		at := arrived[p]
		out.latencies = append(out.latencies, at.Sub(posted[p]))
		if at.After(last) {
			last = at
		}
	}
	b.t.Logf("stop-sell post → channel latencies: %v", out.latencies)
	// The bulk batch drains; what reached the channel after the last stop-sell shows
	// it was still saturated then.
	awaitSmoother(b.t, s.TC, models.SmootherWorkflowID(channel),
		func(st models.SmootherStatus) bool { return st.Running == 0 && st.Pending == 0 })
	out.arrivals = arrivals(s, channel, nil)
	require.GreaterOrEqual(b.t, len(out.arrivals), nBulk+nUrgent, "every change reached the channel")
	for _, t := range out.arrivals {
		if t.After(last) {
			out.behind++
		}
	}
	out.throttled = s.Sim.Stats()[channel].Throttled
	_ = s.TC.TerminateWorkflow(ctx, models.SmootherWorkflowID(channel), "", "end of benchmark")
	return out
}

func (b *bench) turns() {
	const rate = 60
	s := b.stack(stack.Options{
		Channels: map[string]stack.Channel{"booking_com": {PerMinute: rate, Burst: 6, MaxLines: 1}}})
	// Property 1's year-long sync: 4,000 one-night requests in 8 batches of 500.
	var runs []client.WorkflowRun
	for k := range 8 {
		ms := rateChanges("booking_com", 1, 500, time.Now().Unix(), 5, "150.00")
		for i := range ms {
			ms[i].RoomTypeCode = fmt.Sprintf("R%d", k)
		}
		runs = append(runs, s.startMutations(b.t, "bench-year-"+uuid.NewString()[:8], ms))
	}
	time.Sleep(20 * time.Second)
	// Property 2 sends one change at a time, same priority.
	var changes []models.Mutation
	for i := range 8 {
		a := decimal.New(int64(200+i), 0)
		changes = append(changes, models.Mutation{ID: uuid.NewString(), Channel: "booking_com",
			PropertyID: fmt.Sprintf("prop_%08x", 0xb000+i), RoomTypeCode: "DBL", RatePlanCode: "BAR",
			StayDate: benchDay(), Values: models.Values{Amount: &a, Currency: "EUR"}, Version: time.Now().UnixNano(), Priority: 5})
	}
	lat := b.changeLatencies(s, "booking_com", changes, 15*time.Second, models.FamilyRates)
	b.t.Logf("other property's latencies: %v", lat)
	for _, r := range runs {
		_ = s.TC.TerminateWorkflow(context.Background(), r.GetID(), "", "end of benchmark")
	}
	b.row("another property's changes beside a 4,000-request bulk sync, booking_com 60/min, equal priority",
		fmt.Sprintf("p50 %.2f s, p99 %.2f s over %d changes (token interval 1 s)",
			percentile(lat, .5).Seconds(), percentile(lat, .99).Seconds(), len(lat)),
		"p99 ≤ 2 token intervals")
}

func (b *bench) race() {
	s := b.stack(stack.Options{Workers: 3,
		Channels: map[string]stack.Channel{"agoda": {PerMinute: 600, Burst: 20, MaxLines: 2}}})
	// 200 cells; batch A carries the newer version of even cells, batch B of odd ones.
	base := time.Now().Unix() * 10
	var a, c []models.Mutation
	for i := range 200 {
		prop := fmt.Sprintf("prop_%08x", i%5+1)
		night := benchDay().AddDays(i / 5)
		va, vb := base+1, base+2
		if i%2 == 0 {
			va, vb = base+2, base+1
		}
		pa, pb := decimal.New(100+int64(va-base), 0), decimal.New(100+int64(vb-base), 0)
		mk := func(v int64, amt decimal.Decimal) models.Mutation {
			return models.Mutation{ID: uuid.NewString(), Channel: "agoda", PropertyID: prop, RoomTypeCode: "DBL",
				RatePlanCode: "BAR", StayDate: night, Values: models.Values{Amount: &amt, Currency: "EUR"}, Version: v, Priority: 3}
		}
		a, c = append(a, mk(va, pa)), append(c, mk(vb, pb))
	}
	ra := s.startMutations(b.t, "bench-race-a-"+uuid.NewString()[:8], a)
	rb := s.startMutations(b.t, "bench-race-b-"+uuid.NewString()[:8], c)
	sa, sb := waitBatch(b.t, ra, 10*time.Minute), waitBatch(b.t, rb, 10*time.Minute)
	ta, tb := sa.Totals(), sb.Totals()
	require.Equal(b.t, 200, ta.Done())
	require.Equal(b.t, 200, tb.Done())
	stats := s.Sim.Stats()["agoda"]
	b.row("two batches racing on the same 200 cells, interleaved versions, 3 workers",
		fmt.Sprintf("stale_received %d, stale_overwrites %d; outcomes A %d+%d sup, B %d+%d sup of 200 each, %d dead-lettered",
			stats.StaleReceived, stats.StaleOverwrites, ta.Committed, ta.Superseded, tb.Committed, tb.Superseded,
			ta.DeadLettered+tb.DeadLettered),
		"0, 0, every update one outcome")
}

// historyCost is the billable actions and history events of every run of the
// batch's workflows (the batch, its children, and their continuations).
func historyCost(t *testing.T, tc client.Client, batchID string) (actions, events int) {
	t.Helper()
	ctx := context.Background()
	queries := []string{"WorkflowId = '" + models.BatchWorkflowID(batchID) + "'",
		models.SearchAttrBatchID + " = '" + batchID + "' AND WorkflowType = 'ChannelSync'"}
	for _, q := range queries {
		var token []byte
		for {
			resp, err := tc.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Query: q, NextPageToken: token})
			require.NoError(t, err)
			for _, e := range resp.Executions {
				a, n := runCost(t, tc, e.Execution.WorkflowId, e.Execution.RunId)
				actions += a
				events += n
			}
			if token = resp.NextPageToken; len(token) == 0 {
				break
			}
		}
	}
	return actions, events
}

// runCost counts one run's history events and the actions Temporal Cloud bills for
// them: the run's start, activity attempts, timers, signals, markers, search
// attribute upserts and updates. A child's start is counted once, by its own run.
func runCost(t *testing.T, tc client.Client, id, runID string) (actions, events int) {
	t.Helper()
	h := runHistory(t, tc, id, runID)
	for _, e := range h.Events {
		actions += actionsOf(e)
	}
	return actions, len(h.Events)
}

func actionsOf(e *historypb.HistoryEvent) int {
	switch e.GetEventType() {
	case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED, enumspb.EVENT_TYPE_TIMER_STARTED,
		enumspb.EVENT_TYPE_SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED, enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED,
		enumspb.EVENT_TYPE_MARKER_RECORDED, enumspb.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES,
		enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED:
		return 1
	case enumspb.EVENT_TYPE_ACTIVITY_TASK_STARTED:
		return max(1, int(e.GetActivityTaskStartedEventAttributes().GetAttempt()))
	}
	return 0
}

func (b *bench) cost() {
	const rate, n = 60, 120
	s := b.stack(stack.Options{
		Channels: map[string]stack.Channel{"expedia": {PerMinute: rate, Burst: 6, MaxLines: 1}}})
	id := "bench-cost-" + uuid.NewString()[:8]
	ms := rateChanges("expedia", n, 1, time.Now().Unix(), 5, "130.00")
	st := waitBatch(b.t, s.startMutations(b.t, id, ms), 10*time.Minute)
	delivered := s.Sim.Stats()["expedia"].Accepted
	require.Equal(b.t, n, st.Totals().Committed)
	actions, events := historyCost(b.t, s.TC, id)
	b.row(fmt.Sprintf("saturated channel (expedia 60/min), whole batch of %d requests", n),
		fmt.Sprintf("%.2f actions and %.1f history events per delivered request (%d delivered)",
			float64(actions)/float64(delivered), float64(events)/float64(delivered), delivered),
		"≤ 1.5 actions, ≤ 6 events")

	// A realistic batch: the sample generator's 2,000 mutations on the default channels.
	s2 := b.stack(stack.Options{})
	id2 := "bench-sample-" + uuid.NewString()[:8]
	sample := sample.Batch(2000, models.DateOf(time.Now()), time.Now().Unix(), 1)
	st2 := waitBatch(b.t, s2.startMutations(b.t, id2, sample), 10*time.Minute)
	a2, e2 := historyCost(b.t, s2.TC, id2)
	b.row("realistic sample, 2,000 mutations on the default channels",
		fmt.Sprintf("%.4f actions per mutation (%d actions, %d events, %d requests)", float64(a2)/2000, a2, e2,
			st2.Totals().Requests),
		"≤ 0.03 actions per mutation")
}

func (b *bench) pause() {
	// A short-timer configuration: the limiter's pause poll is 3 s instead of 30 min,
	// so a 12 s pause is as many polls as 2 hours at the default.
	run := func(paused bool) int {
		s := b.stack(stack.Options{Env: map[string]string{"PARITYSYNC_PAUSE_POLL": "3s"},
			Channels: map[string]stack.Channel{"agoda": {PerMinute: 600, Burst: 20, MaxLines: 1}}})
		id := "bench-pause-" + uuid.NewString()[:8]
		ms := rateChanges("agoda", 5, 1, time.Now().Unix(), 3, "110.00")
		lim := s.Lim
		if paused {
			require.NoError(b.t, lim.Pause(context.Background(), "agoda", "benchmark pause"))
			time.AfterFunc(12*time.Second, func() { _ = lim.Resume(context.Background(), "agoda") })
		}
		st := waitBatch(b.t, s.startMutations(b.t, id, ms), 5*time.Minute)
		require.Equal(b.t, 5, st.Totals().Committed)
		_, events := historyCost(b.t, s.TC, id)
		return events
	}
	base, paused := run(false), run(true)
	b.row("a channel paused for 2 hours (pause poll 3 s, 12 s pause = 4 polls, as 2 h at the 30 min default)",
		fmt.Sprintf("%d history events added by the pause (%d paused vs %d not)", paused-base, paused, base),
		"< 100 events per run")
}

// noopPush is PushRequest doing nothing: the same workflows around no limiter and no
// channel, one request per activity.
func noopPush(context.Context, models.PushInput) (models.PushResult, error) {
	return models.PushResult{Committed: 1}, nil
}

// noopChainedPush is noopPush that, like PushRequest with every next slot due at
// once, also delivers the lane's requests it is handed after this one (in.Next,
// then in.Then) in the same attempt, so that the workflows run as many activities
// per request as beside the real PushRequest on a channel with room.
func noopChainedPush(_ context.Context, in models.PushInput) (models.PushResult, error) {
	res := models.PushResult{Committed: 1}
	if in.NextReservation == "" || len(in.Then) == 0 {
		return res, nil
	}
	for range min(1+len(in.Then), 1+len(in.ThenReservations)) {
		res.Chained = append(res.Chained, models.PushResult{Committed: 1})
	}
	return res, nil
}

// noopWorker starts the same workflows on a task queue of their own, with every
// activity as the worker has it but PushRequest, which is push (noopPush or
// noopChainedPush), and returns the queue. It stops with the test.
func (b *bench) noopWorker(s *e2eStack, push func(context.Context, models.PushInput) (models.PushResult, error), suffix string) string {
	real := s.Acts
	noopQueue := s.Queue + "-" + suffix
	w := sdkworker.New(s.TC, noopQueue, sdkworker.Options{MaxConcurrentActivityExecutionSize: 32})
	w.RegisterWorkflow(workflows.BatchSync)
	w.RegisterWorkflow(workflows.ChannelSync)
	rv := reflect.ValueOf(real)
	for i := range rv.NumMethod() {
		name := rv.Type().Method(i).Name
		if name != "PushRequest" {
			w.RegisterActivityWithOptions(rv.Method(i).Interface(), activity.RegisterOptions{Name: name})
		}
	}
	w.RegisterActivityWithOptions(push, activity.RegisterOptions{Name: "PushRequest"})
	require.NoError(b.t, w.Start())
	b.t.Cleanup(w.Stop)
	return noopQueue
}

// startBig starts BatchSync of ms on queue as the API does (ops.StartBatch): a
// batch over the inline limits travels by reference, so 500 properties' batch does
// not pass Temporal's payload limit.
func (b *bench) startBig(s *e2eStack, queue, id string, ms []models.Mutation) client.WorkflowRun {
	started, err := ops.StartBatch(context.Background(), s.TC, queue, s.Acts.Store, ops.Batch{ID: id, Mutations: ms})
	require.NoError(b.t, err)
	return started.Run
}

// perProperty runs one batch of 20 one-line requests for each of 50, 200 and 500
// properties (PARITYSYNC_BENCH_PROPERTIES, a comma-separated list, picks the sizes)
// on a channel that limits per property at 10/min, burst 2, and reports accepted
// requests per minute against what the channel allows (properties × 10) or, if
// lower, the no-op ceiling: the same batch through the same workflows with a
// PushRequest that does nothing, in the same run. The rate is measured over the
// first PARITYSYNC_BENCH_MEASURE (3m) of the batch, which is then cancelled.
func (b *bench) perProperty() {
	sizes := []int{50, 200, 500}
	if v := os.Getenv("PARITYSYNC_BENCH_PROPERTIES"); v != "" {
		sizes = nil
		for _, f := range strings.Split(v, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			require.NoError(b.t, err, "PARITYSYNC_BENCH_PROPERTIES")
			sizes = append(sizes, n)
		}
	}
	measure := 3 * time.Minute
	if v := os.Getenv("PARITYSYNC_BENCH_MEASURE"); v != "" {
		d, err := time.ParseDuration(v)
		require.NoError(b.t, err, "PARITYSYNC_BENCH_MEASURE")
		measure = d
	}
	for _, props := range sizes {
		b.perPropertyWith(props, measure)
	}
}

func (b *bench) perPropertyWith(props int, measure time.Duration) {
	const rate, burst, nights = 10, 2, 20
	s := b.stack(stack.Options{Env: map[string]string{"PARITYSYNC_CHANNEL_EXPEDIA_SCOPE": "property"},
		Channels: map[string]stack.Channel{"expedia": {PerMinute: rate, Burst: burst, MaxLines: 1}}})
	n := props * nights
	ms := rateChanges("expedia", props, nights, time.Now().Unix(), 5, "120.00")

	// The no-op ceiling: the same batch, the same workflows, nothing pushed.
	noopQueue := b.noopWorker(s, noopPush, "noop")
	noopID := "bench-pp-noop-" + uuid.NewString()[:8]
	start := time.Now()
	run := b.startBig(s, noopQueue, noopID, ms)
	st := waitBatch(b.t, run, 30*time.Minute)
	require.Equal(b.t, n, st.Totals().Committed)
	noop := float64(n) / time.Since(start).Minutes()

	id := "bench-pp-" + uuid.NewString()[:8]
	start = time.Now()
	run = b.startBig(s, s.Queue, id, ms)
	ctx, cancel := context.WithTimeout(context.Background(), measure)
	err := run.Get(ctx, &st)
	cancel()
	end := time.Now()
	if err != nil {
		// Still running after the measurement: cancel it and let it close.
		require.NoError(b.t, s.TC.CancelWorkflow(context.Background(), run.GetID(), ""))
		wctx, wcancel := context.WithTimeout(context.Background(), 5*time.Minute)
		_ = run.Get(wctx, nil)
		wcancel()
	}
	accepted := 0
	perProp := map[string][]time.Time{}
	for _, r := range s.Sim.Requests("expedia", time.Time{}) {
		if r.Family == "" {
			continue
		}
		perProp[r.Property] = append(perProp[r.Property], r.At)
		if r.Status == http.StatusOK && !r.At.After(end) {
			accepted++
		}
	}
	most := 0
	for _, ts := range perProp {
		most = max(most, mostInWindow(ts))
	}
	perMin := float64(accepted) / end.Sub(start).Minutes()
	ceiling := math.Min(float64(props*rate), noop)
	b.row(fmt.Sprintf("one batch, %d properties × %d one-line requests, a per-property channel at %d/min burst %d",
		props, nights, rate, burst),
		fmt.Sprintf("%.0f accepted/min over %.0f s vs min(%d allowed, %.0f no-op) = %.2f; %d 429s; most for one property in any 60 s %d",
			perMin, end.Sub(start).Seconds(), props*rate, noop, perMin/ceiling, s.Sim.Stats()["expedia"].Throttled, most),
		"≥ 0.9, 0, ≤ 10")
}

// plainPush is the comparison's whole workflow: one activity per request, rate
// limited by Temporal's task queue limit alone.
func plainPush(ctx workflow.Context, n int) error {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: time.Minute,
		RetryPolicy: &temporal.RetryPolicy{MaximumAttempts: 20}})
	var futs []workflow.Future
	for i := range n {
		futs = append(futs, workflow.ExecuteActivity(ctx, "PlainPush", i))
	}
	for _, f := range futs {
		if err := f.Get(ctx, nil); err != nil {
			return err
		}
	}
	return nil
}

func (b *bench) versus() {
	const n, rate, burst = 240, 60, 6
	s := b.stack(stack.Options{Workers: 3,
		Channels: map[string]stack.Channel{"expedia": {PerMinute: rate, Burst: burst, MaxLines: 1}}})
	// Temporal's limiter: three workers on their own queue with
	// TaskQueueActivitiesPerSecond 1.0, pushing the same requests with our client and
	// no limiter. A 429 fails the activity and Temporal retries it.
	reqs := make([]models.ChannelRequest, n)
	ms := rateChanges("expedia", n, 1, time.Now().Unix(), 5, "160.00")
	for i, m := range ms {
		reqs[i] = models.Coalesce([]models.Mutation{m}, s.Acts.Channels).Requests[0]
	}
	client := s.Acts.Client
	plainQueue := s.Queue + "-plain"
	var workers []sdkworker.Worker
	for range 3 {
		w := sdkworker.New(s.TC, plainQueue, sdkworker.Options{TaskQueueActivitiesPerSecond: 1.0})
		w.RegisterWorkflow(plainPush)
		w.RegisterActivityWithOptions(func(ctx context.Context, i int) error {
			resp, err := client.Push(ctx, reqs[i])
			if err != nil {
				return err
			}
			if resp.Class != channels.ClassCommitted {
				return fmt.Errorf("push %d: %s %d", i, resp.Class, resp.Status)
			}
			return nil
		}, activity.RegisterOptions{Name: "PlainPush"})
		require.NoError(b.t, w.Start())
		workers = append(workers, w)
	}
	plainID := "bench-plain-" + uuid.NewString()[:8]
	start := time.Now()
	run, err := s.TC.ExecuteWorkflow(context.Background(), client2(plainID, plainQueue), plainPush, n)
	require.NoError(b.t, err)
	require.NoError(b.t, run.Get(context.Background(), nil))
	plainTime := time.Since(start)
	for _, w := range workers {
		w.Stop()
	}
	plainStats := s.Sim.Stats()["expedia"]
	plainArrivals := arrivals(s, "expedia", nil)
	plainActions, _ := runCost(b.t, s.TC, plainID, "")

	// The plain run's requests fill the channel's window for another minute: our
	// limiter would rightly read them from the headers as others' traffic.
	time.Sleep(61 * time.Second)

	// paritysync: new prices for the same cells, so the channel sees new content.
	ms2 := rateChanges("expedia", n, 1, time.Now().Unix()+1, models.PriorityDefault, "161.00")
	id := "bench-vs-" + uuid.NewString()[:8]
	start = time.Now()
	st := waitBatch(b.t, s.startMutations(b.t, id, ms2), 20*time.Minute)
	ours := time.Since(start)
	require.Equal(b.t, n, st.Totals().Committed)
	all := arrivals(s, "expedia", nil)
	ourArrivals := all[len(plainArrivals):]
	ourStats := s.Sim.Stats()["expedia"]
	actions, _ := historyCost(b.t, s.TC, id)
	b.row(fmt.Sprintf("3 workers, expedia 60/min burst 6, %d one-line requests: paritysync", n),
		fmt.Sprintf("makespan %.0f s, %d 429s, max in 60 s %d, %.2f actions per request",
			ours.Seconds(), ourStats.Throttled-plainStats.Throttled, mostInWindow(ourArrivals), float64(actions)/n),
		"≤ Temporal's makespan, 0 429s, ≤ 60, ≤ 2 actions")
	b.row(("… the same with TaskQueueActivitiesPerSecond 1.0 (plain workflow, no limiter)"),
		fmt.Sprintf("makespan %.0f s, %d 429s, max in 60 s %d, %.2f actions per request",
			plainTime.Seconds(), plainStats.Throttled, mostInWindow(plainArrivals), float64(plainActions)/n),
		"(reference)")
}

func client2(id, queue string) client.StartWorkflowOptions {
	return client.StartWorkflowOptions{ID: id, TaskQueue: queue}
}

// trace replays a burst pattern (every 2 minutes, 40 rates requests within 4 s and
// one urgent stop-sell) both through `starter simulate` and through the worker
// against the simulator, and reports the sends per minute of each.
func (b *bench) trace() {
	const rate, burst, bursts = 30, 3, 2
	type row struct {
		at       time.Duration
		prop     string
		priority int
		family   models.Family
	}
	var rows []row
	var csv strings.Builder
	csv.WriteString("at_seconds,channel,family,property_id,priority\n")
	for k := range bursts {
		start := time.Duration(k) * 2 * time.Minute
		for i := range 40 {
			rows = append(rows, row{start + time.Duration(i)*100*time.Millisecond, fmt.Sprintf("prop_%08x", k*100+i+1), 5, models.FamilyRates})
		}
		rows = append(rows, row{start + 2*time.Second, fmt.Sprintf("prop_%08x", 0xc000+k), 1, models.FamilyRestrictions})
	}
	for _, r := range rows {
		fmt.Fprintf(&csv, "%.1f,expedia,%s,%s,%d\n", r.at.Seconds(), r.family, r.prop, r.priority)
	}
	dir := b.t.TempDir()
	tracePath := dir + "/trace.csv"
	require.NoError(b.t, os.WriteFile(tracePath, []byte(csv.String()), 0o600))
	cmd := exec.Command("go", "run", "../starter", "simulate", "--trace", tracePath, "--output", "json")
	cmd.Env = append(os.Environ(), "PARITYSYNC_CHANNEL_EXPEDIA_RATE_PER_MINUTE="+fmt.Sprint(rate),
		"PARITYSYNC_CHANNEL_EXPEDIA_BURST="+fmt.Sprint(burst))
	out, err := cmd.Output()
	require.NoError(b.t, err, "starter simulate")
	var simulated []struct {
		Minutes []struct {
			Sent int `json:"sent"`
		} `json:"minutes"`
	}
	require.NoError(b.t, json.Unmarshal(out, &simulated))
	require.Len(b.t, simulated, 1)

	s := b.stack(stack.Options{Channels: map[string]stack.Channel{"expedia": {PerMinute: rate, Burst: burst, MaxLines: 1}}})
	start := time.Now()
	var runs []client.WorkflowRun
	for _, r := range rows {
		time.Sleep(time.Until(start.Add(r.at)))
		m := models.Mutation{ID: uuid.NewString(), Channel: "expedia", PropertyID: r.prop, RoomTypeCode: "DBL",
			RatePlanCode: "BAR", StayDate: benchDay(), Version: time.Now().UnixNano(), Priority: r.priority}
		if r.family == models.FamilyRestrictions {
			stop := true
			m.StopSell = &stop
		} else {
			a := decimal.New(120, 0)
			m.Amount, m.Currency = &a, "EUR"
		}
		runs = append(runs, s.startMutations(b.t, "bench-trace-"+uuid.NewString()[:8], []models.Mutation{m}))
	}
	for _, r := range runs {
		waitBatch(b.t, r, 10*time.Minute)
	}
	var worker []int
	for _, t := range arrivals(s, "expedia", nil) {
		i := int(t.Sub(start) / time.Minute)
		for len(worker) <= i {
			worker = append(worker, 0)
		}
		worker[i]++
	}
	var sim []int
	for _, m := range simulated[0].Minutes {
		sim = append(sim, m.Sent)
	}
	b.row(fmt.Sprintf("the same burst trace (%d bursts of 41, expedia %d/min burst %d): sends per minute", bursts, rate, burst),
		fmt.Sprintf("starter simulate %v; worker against otasim %v", sim, worker), "the same counts")
}
