package e2e

import (
	"bytes"
	"context"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shopspring/decimal"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"

	"github.com/paritysync/paritysync/activities/store"
	"github.com/paritysync/paritysync/channels/opentraveltest"
	"github.com/paritysync/paritysync/channels/wire"
	"github.com/paritysync/paritysync/e2e/stack"
	"github.com/paritysync/paritysync/models"
	"github.com/paritysync/paritysync/otasim/sim"
	"github.com/paritysync/paritysync/worker/app"
)

// The hostile channel, as the delivery issue checks it, in one run: a dev server,
// the simulator over real HTTP, real Redis and PostgreSQL, short windows. Each
// scenario logs its figure; TestHostileChannel prints them as one table.

// exchange is one HTTP exchange with the simulator as the worker saw it.
type exchange struct {
	start, end time.Time
	path       string
	status     int
	header     http.Header
	req, resp  []byte
}

// exchanges keeps every exchange of a stack's simulator (Serve wraps it).
type exchanges struct {
	mu  sync.Mutex
	got []exchange
}

// teeWriter passes a response on and keeps a copy.
type teeWriter struct {
	http.ResponseWriter
	status int
	body   bytes.Buffer
}

func (w *teeWriter) WriteHeader(code int) { w.status = code; w.ResponseWriter.WriteHeader(code) }
func (w *teeWriter) Write(b []byte) (int, error) {
	w.body.Write(b)
	return w.ResponseWriter.Write(b)
}

func (x *exchanges) serve(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		tw := &teeWriter{ResponseWriter: w, status: http.StatusOK}
		h.ServeHTTP(tw, r)
		x.mu.Lock()
		defer x.mu.Unlock()
		x.got = append(x.got, exchange{start: start, end: time.Now(), path: r.URL.Path, status: tw.status,
			header: w.Header().Clone(), req: body, resp: tw.body.Bytes()})
	})
}

func (x *exchanges) all() []exchange {
	x.mu.Lock()
	defer x.mu.Unlock()
	return append([]exchange(nil), x.got...)
}

// hostileRow is one scenario's figure for the table.
type hostileRow struct{ scenario, figure, want string }

// hostileTable collects the scenarios' figures.
type hostileTable struct {
	mu   sync.Mutex
	rows []hostileRow
}

func (h *hostileTable) add(t *testing.T, scenario, figure, want string) {
	t.Logf("%s: %s (want %s)", scenario, figure, want)
	h.mu.Lock()
	defer h.mu.Unlock()
	h.rows = append(h.rows, hostileRow{scenario, figure, want})
}

// hostileChannels is a channels file with a generic and an OpenTravel channel at
// the short window, each with its own credential.
func hostileChannels(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	return stack.WriteFile(t, dir, "channels.yaml", fmt.Sprintf(`
channels:
  - slug: expedia
    window: 6s
  - slug: ota_demo
    protocol: opentravel
    window: 6s
    credentials_file: %s
`, stack.WriteFile(t, dir, "ota.secret", "hotel-7:ota-pass\n")))
}

// hostileStack is a stack on hostileChannels whose simulator exchanges are kept;
// simEdit changes the simulator's configuration, env the worker's.
func hostileStack(t *testing.T, limits map[string]stack.Channel, env map[string]string, simEdit func(*sim.Config)) (*e2eStack, *exchanges) {
	t.Helper()
	srv := startDevServer(t)
	x := &exchanges{}
	e := map[string]string{"PARITYSYNC_CHANNELS_FILE": hostileChannels(t)}
	maps.Copy(e, env)
	s := startStackWith(t, srv, stack.Options{Channels: limits, Env: e, Serve: x.serve, Sim: func(c *sim.Config) {
		c.StaticTokens = append(c.StaticTokens, "ota-pass")
		if simEdit != nil {
			simEdit(c)
		}
	}})
	return s, x
}

// quickRetry retries transient failures within seconds, so a scenario's batches
// end in a short test.
var quickRetry = models.RetryPolicy{Initial: 200 * time.Millisecond, Max: 2 * time.Second, Attempts: 5,
	MaxWait: time.Minute, MaxDeferrals: 200}

// ariChanges is one change per property and night on channel, rates and
// availability both, at version v, from 20 + skip days ahead; prices differ per
// night so no two nights merge.
func ariChanges(channel string, props, nights, skip int, v int64, base string) []models.Mutation {
	var ms []models.Mutation
	start := models.DateOf(time.Now()).AddDays(20 + skip)
	for p := range props {
		for n := range nights {
			amount := decimal.RequireFromString(base).Add(decimal.New(int64(n), 0))
			inv := (n + p) % 7
			ms = append(ms, models.Mutation{ID: fmt.Sprintf("%s-p%d-n%d-v%d", channel, p, n, v),
				PropertyID: fmt.Sprintf("prop_%08d", p+1), RoomTypeCode: "DBL", RatePlanCode: "BAR",
				Channel: channel, StayDate: start.AddDays(n), Values: models.Values{Amount: &amount, Currency: "EUR", Inventory: &inv},
				Version: v})
		}
	}
	return ms
}

// falseCommits counts the cells and families of channel the store holds as
// acknowledged whose version (or a newer one) the channel never applied.
func falseCommits(t *testing.T, s *e2eStack, st *store.Store, channel string) (acked, falses int) {
	t.Helper()
	applied := s.Sim.Applied(channel)
	from := models.DateOf(time.Now())
	require.NoError(t, st.CellStates(context.Background(), channel, from, from.AddDays(400), func(c store.CellState) error {
		if c.Acked.Version == 0 {
			return nil
		}
		acked++
		for _, a := range applied {
			if a.Property == c.Cell.PropertyID && a.Family == c.Family && a.RoomTypeCode == c.Cell.RoomTypeCode &&
				a.RatePlanCode == c.Cell.RatePlanCode && !c.Cell.StayDate.Before(a.From) && !a.To.Before(c.Cell.StayDate) &&
				a.Version >= c.Acked.Version {
				return nil
			}
		}
		falses++
		return nil
	}))
	return acked, falses
}

// validateOpenTravel validates every OpenTravel request body and answer of xs
// against the 2017B schemas (and the requests against 2003B too), and returns how
// many documents it checked.
func validateOpenTravel(t *testing.T, xs []exchange) int {
	t.Helper()
	reqs, answers := map[string]map[string][]byte{}, map[string]map[string][]byte{}
	add := func(m map[string]map[string][]byte, schema, name string, doc []byte) {
		if m[schema] == nil {
			m[schema] = map[string][]byte{}
		}
		m[schema][name] = doc
	}
	n := 0
	for i, x := range xs {
		_, msg, ok := strings.Cut(x.path, wire.OTAPathPrefix)
		if !ok {
			continue
		}
		name := fmt.Sprintf("%04d-%d", i, x.status)
		add(reqs, msg+"RQ", name, x.req)
		n++
		if !wellFormedXML(x.resp) {
			// A bad-body fault's HTML page, empty body or half answer is not
			// OpenTravel on purpose; every other answer must be.
			continue
		}
		add(answers, msg+"RS", name, x.resp)
		n++
	}
	require.NotEmpty(t, reqs, "the run sent OpenTravel requests")
	for _, schema := range slices.Sorted(maps.Keys(reqs)) {
		for _, release := range opentraveltest.Releases {
			opentraveltest.Validate(t, release, schema, reqs[schema])
		}
	}
	for _, schema := range slices.Sorted(maps.Keys(answers)) {
		opentraveltest.Validate(t, "ota2017b", schema, answers[schema])
	}
	return n
}

// wellFormedXML reports whether doc is one whole XML document.
func wellFormedXML(doc []byte) bool {
	if !bytes.HasPrefix(bytes.TrimSpace(doc), []byte("<?xml")) {
		return false
	}
	d := xml.NewDecoder(bytes.NewReader(doc))
	for {
		_, err := d.Token()
		if errors.Is(err, io.EOF) {
			return true
		}
		if err != nil {
			return false
		}
	}
}

// TestHostileChannel runs the four hostile-channel scenarios side by side and logs
// one figure for each:
//   - 200s with garbage bodies (an HTML page, an empty body, half an answer, an
//     error shape) on a generic and an OpenTravel channel: no cell is acknowledged
//     that the channel did not apply (0 false commits); every OpenTravel request
//     body of the run, and every OpenTravel answer, validates against the schemas;
//   - a channel clock 5 s behind answering a 429 storm with date-only Retry-After:
//     no call arrives before the announced time beyond those already in flight;
//   - a channel that applied a push 15 s after receiving it, after the client gave
//     up at 2 s: no older version is applied over a newer one, and the channel ends
//     with the newer version;
//   - two workers of one task queue: another key prefix is refused at start,
//     another rate under the same prefix too, and two agreeing workers keep one
//     budget (no window of the channel over its limit).
func TestHostileChannel(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: needs a Temporal dev server")
	}
	table := &hostileTable{}
	t.Cleanup(func() {
		var b strings.Builder
		fmt.Fprintf(&b, "hostile channel:\n%-34s | %-70s | %s\n", "scenario", "figure", "want")
		for _, r := range table.rows {
			fmt.Fprintf(&b, "%-34s | %-70s | %s\n", r.scenario, r.figure, r.want)
		}
		t.Log(b.String())
	})
	t.Run("garbage 200s", func(t *testing.T) { t.Parallel(); hostileGarbage(t, table) })
	t.Run("clock 5 s behind", func(t *testing.T) { t.Parallel(); hostileClock(t, table) })
	t.Run("late applies", func(t *testing.T) { t.Parallel(); hostileLateApply(t, table) })
	t.Run("two workers", func(t *testing.T) { t.Parallel(); hostileTwoWorkers(t, table) })
}

// answerReach is how long an answer may take from the channel to the limiter's
// back-off: a loopback read and one Redis round trip, with a busy machine's lateness.
const answerReach = 500 * time.Millisecond

// hostileGarbage: half the pushes are answered 200 with a body that confirms
// nothing, one shape per batch. Each batch has nights of its own: a 200 that
// confirms nothing keeps its nights leased (the channel may have applied it), so
// the next batch would wait for those leases.
func hostileGarbage(t *testing.T, table *hostileTable) {
	limits := map[string]stack.Channel{"expedia": {PerMinute: 60, Burst: 6, MaxLines: 2},
		"ota_demo": {PerMinute: 60, Burst: 6, MaxLines: 2}}
	// Half the answers failing opens the circuit breaker now and then: a short
	// cool-down keeps the run short.
	s, x := hostileStack(t, limits, map[string]string{"PARITYSYNC_CHANNEL_EXPEDIA_BREAKER_COOLDOWN": "1s",
		"PARITYSYNC_CHANNEL_OTA_DEMO_BREAKER_COOLDOWN": "1s"}, nil)
	st := s.OpenStore(t)
	var committed, dead int
	for i, shape := range []string{sim.BadBodyHTML, sim.BadBodyEmpty, sim.BadBodyTruncated, sim.BadBodyError} {
		require.NoError(t, s.Sim.SetFaults(sim.Faults{BadBodyRatio: 0.5, BadBody: shape}))
		var ms []models.Mutation
		for _, ch := range []string{"expedia", "ota_demo"} {
			ms = append(ms, ariChanges(ch, 2, 4, 10*i, int64(i+1), fmt.Sprintf("%d.00", 100+10*i))...)
		}
		run := s.startBatch(t, models.BatchSyncInput{BatchID: fmt.Sprintf("garbage-%s-%d", shape, time.Now().UnixNano()),
			Mutations: ms, Retry: quickRetry})
		res := waitBatch(t, run, 3*time.Minute)
		require.True(t, res.Done)
		tot := res.Totals()
		committed += tot.Committed
		dead += tot.DeadLettered
	}
	stats := s.Sim.Stats()
	bad := 0
	var falses, acked int
	for _, ch := range []string{"expedia", "ota_demo"} {
		a, f := falseCommits(t, s, st, ch)
		acked, falses = acked+a, falses+f
		bad += stats[ch].FaultsInjected
	}
	docs := validateOpenTravel(t, x.all())
	table.add(t, "200s with garbage bodies",
		fmt.Sprintf("%d false commits of %d acknowledged cells; %d garbage 200s; %d committed, %d dead-lettered",
			falses, acked, bad, committed, dead), "0 false commits")
	table.add(t, "OpenTravel bodies of the live run",
		fmt.Sprintf("%d requests and answers validated against OTA 2017B (requests also 2003B)", docs), "all valid")
	require.Positive(t, bad, "the channel answered garbage")
	require.Positive(t, acked)
	require.Zero(t, falses, "cells acknowledged that the channel never applied")
}

// hostileClock: the channel's clock is 5 s behind ours and every Retry-After is a
// date; a 429 storm starts while a batch is under way.
func hostileClock(t *testing.T, table *hostileTable) {
	const offset = -5 * time.Second
	// A burst of 4: without the pace restarting at the back-off's end, the
	// requests that waited for it would leave together.
	limits := map[string]stack.Channel{"expedia": {PerMinute: 24, Burst: 4, MaxLines: 1}}
	interval := (testWindow + 500*time.Millisecond) / 24
	s, x := hostileStack(t, limits, nil, func(c *sim.Config) {
		c.ClockOffset, c.RetryAfter = offset, sim.RetryAfterDate
	})
	ms := ariChanges("expedia", 1, 12, 0, 1, "150.00")
	for i := range ms {
		ms[i].Inventory = nil // one family: twelve requests at the pace
	}
	run := s.startBatch(t, models.BatchSyncInput{BatchID: fmt.Sprintf("clock-%d", time.Now().UnixNano()),
		Mutations: ms, Retry: quickRetry})
	require.Eventually(t, func() bool { return len(s.Sim.Requests("expedia", time.Time{})) >= 2 }, time.Minute,
		20*time.Millisecond, "the batch reaches the channel")
	require.NoError(t, s.Sim.SetFaults(sim.Faults{StormSeconds: 3, Channels: []string{"expedia"}}))
	res := waitBatch(t, run, 3*time.Minute)
	require.True(t, res.Done)

	// An arrival is early when it comes before the latest time an earlier answer
	// announced; in flight when no answer announcing that time had reached the
	// worker when it was sent. The announced dates are on the channel's clock. An
	// answer reaches the worker (read, settled into the limiter's back-off) some
	// time after it leaves the channel: answerReach allows for that on a loaded
	// machine, where a push granted a moment earlier may write its call meanwhile.
	type announce struct {
		known time.Time // when the answer left the channel
		until time.Time // the announced time, on our clock
	}
	var anns []announce
	var early, inFlight, throttled, pushes int
	var after []time.Time // pushes after the last throttled answer
	for _, e := range x.all() {
		if !strings.HasSuffix(e.path, "/ari") || len(e.req) == 0 {
			continue
		}
		pushes++
		if throttled > 0 && e.status != http.StatusTooManyRequests {
			after = append(after, e.start)
		} else {
			after = nil
		}
		var latest, knownLatest time.Time
		for _, a := range anns {
			if a.until.After(latest) {
				latest = a.until
			}
			if !a.known.After(e.start) && a.until.After(knownLatest) {
				knownLatest = a.until
			}
		}
		if e.start.Before(latest) {
			early++
			if !e.start.Before(knownLatest) {
				inFlight++
			}
		}
		if e.status == http.StatusTooManyRequests {
			throttled++
			at, err := http.ParseTime(e.header.Get(models.HeaderRetryAfter))
			require.NoError(t, err, "a date-only Retry-After: %q", e.header.Get(models.HeaderRetryAfter))
			anns = append(anns, announce{known: e.end.Add(answerReach), until: at.Add(-offset)})
		}
	}
	simEarly := s.Sim.Stats()["expedia"].EarlyArrivals
	sort.Slice(after, func(i, j int) bool { return after[i].Before(after[j]) })
	first := after[:min(4, len(after))]
	var gaps []time.Duration
	for i := 1; i < len(first); i++ {
		gaps = append(gaps, first[i].Sub(first[i-1]).Round(time.Millisecond))
	}
	table.add(t, "clock 5 s behind, date Retry-After",
		fmt.Sprintf("%d early calls beyond %d in flight (channel counts %d early); %d pushes, %d throttled",
			early-inFlight, inFlight, simEarly, pushes, throttled), "0 beyond the in-flight ones")
	table.add(t, "waiters after the back-off",
		fmt.Sprintf("the first %d calls after it %v apart (interval %s, burst 4)", len(first), gaps,
			interval.Round(time.Millisecond)), "at the pace, not together")
	require.Positive(t, throttled, "the storm throttled the batch")
	require.Equal(t, res.Totals().Committed, len(ms), "every change committed after the storm")
	require.Zero(t, early-inFlight, "calls before the announced time that the worker knew of")
	require.LessOrEqual(t, simEarly, inFlight, "the channel's own count of early calls")
	require.Len(t, first, 4, "calls after the storm")
	require.GreaterOrEqual(t, first[3].Sub(first[0]), interval, "the waiters left together: %v", gaps)
}

// hostileLateApply: the channel applies the first push of a cell 15 s after
// receiving it; the client gives up after 2 s, retries, and a newer version
// follows at once.
func hostileLateApply(t *testing.T, table *hostileTable) {
	const applyDelay = 15 * time.Second
	limits := map[string]stack.Channel{"expedia": {PerMinute: 60, Burst: 6, MaxLines: 4}}
	s, _ := hostileStack(t, limits, map[string]string{"PARITYSYNC_HTTP_TIMEOUT": "2s"}, func(c *sim.Config) {
		c.Faults = sim.Faults{ApplyDelayMS: int(applyDelay / time.Millisecond), Channels: []string{"expedia"}}
	})
	v1 := ariChanges("expedia", 2, 3, 0, 1, "100.00")
	run1 := s.startBatch(t, models.BatchSyncInput{BatchID: fmt.Sprintf("late-v1-%d", time.Now().UnixNano()),
		Mutations: v1, Retry: quickRetry})
	require.Eventually(t, func() bool { return len(s.Sim.Requests("expedia", time.Time{})) >= 1 }, time.Minute,
		10*time.Millisecond, "v1 reaches the channel")
	received := time.Now()
	// From now on the channel applies on arrival: what it received before is
	// applied 15 s after it came.
	require.NoError(t, s.Sim.SetFaults(sim.Faults{}))
	v2 := ariChanges("expedia", 2, 3, 0, 2, "200.00")
	run2 := s.startBatch(t, models.BatchSyncInput{BatchID: fmt.Sprintf("late-v2-%d", time.Now().UnixNano()),
		Mutations: v2, Retry: quickRetry})
	r1, r2 := waitBatch(t, run1, 3*time.Minute), waitBatch(t, run2, 3*time.Minute)
	v2Done := time.Since(received)
	time.Sleep(time.Until(received.Add(applyDelay + 2*time.Second)))

	applied := s.Sim.Applied("expedia")
	late := 0
	last := map[string]int64{}
	for _, a := range applied {
		if a.Late {
			late++
		}
		for d := a.From; !a.To.Before(d); d = d.AddDays(1) {
			last[a.Property+"|"+string(a.Family)+"|"+d.String()] = a.Version
		}
	}
	older := s.Sim.Stats()["expedia"].OlderApplied
	notNewest := 0
	for _, v := range last {
		if v != 2 {
			notNewest++
		}
	}
	table.add(t, "late applies up to 15 s",
		fmt.Sprintf("%d older-over-newer; %d late writes; %d of %d nights end on v2; v2 done %s after v1 was received",
			older, late, len(last)-notNewest, len(last), v2Done.Round(time.Second)), "0 older-over-newer")
	require.Positive(t, late, "the channel applied late")
	require.Zero(t, older, "an older version applied over a newer one")
	require.Zero(t, notNewest, "nights whose last write is not v2: %v", last)
	require.Equal(t, 2*len(v2), r2.Totals().Committed+r2.Totals().Superseded, "v2's updates have outcomes")
	_ = r1
}

// hostileTwoWorkers: a second worker on the task queue with another key prefix,
// then one with another rate under the same prefix, then one that agrees.
func hostileTwoWorkers(t *testing.T, table *hostileTable) {
	limits := map[string]stack.Channel{"expedia": {PerMinute: 12, Burst: 2, MaxLines: 1}}
	s, _ := hostileStack(t, limits, nil, nil)
	// The first worker polls before the others start.
	require.Eventually(t, func() bool {
		resp, err := s.TC.DescribeTaskQueue(context.Background(), s.Queue, enumspb.TASK_QUEUE_TYPE_ACTIVITY)
		return err == nil && len(resp.GetPollers()) > 0
	}, 30*time.Second, 100*time.Millisecond, "the first worker polls")
	start := func(edit func(map[string]string)) error {
		env := maps.Clone(s.Env)
		edit(env)
		_, err := s.StartApp(func(k string) string { return env[k] })
		return err
	}
	errPrefix := start(func(e map[string]string) { e["PARITYSYNC_KEY_PREFIX"] = s.Prefix + "other:" })
	errRate := start(func(e map[string]string) { e["PARITYSYNC_CHANNEL_EXPEDIA_RATE_PER_MINUTE"] = "20" })
	require.NoError(t, start(func(map[string]string) {}), "a worker that agrees starts")

	// Two agreeing workers share one budget: 24 pushes (12 per 6 s window).
	ms := ariChanges("expedia", 2, 12, 0, 1, "90.00")
	for i := range ms {
		ms[i].Inventory = nil
	}
	res := waitBatch(t, s.startBatch(t, models.BatchSyncInput{BatchID: fmt.Sprintf("two-%d", time.Now().UnixNano()),
		Mutations: ms, Retry: quickRetry}), 3*time.Minute)
	cs := s.Sim.Stats()["expedia"]
	table.add(t, "two workers, different prefixes",
		fmt.Sprintf("refused: %v", oneLineErr(errPrefix)), "refused or one budget")
	table.add(t, "two workers, same prefix, rate 20 vs 12",
		fmt.Sprintf("refused: %v", oneLineErr(errRate)), "refused")
	table.add(t, "two agreeing workers",
		fmt.Sprintf("most in any 6 s window %d of limit %d; %d throttled; %d committed", cs.MaxWindowRequests, cs.Limit,
			cs.Throttled, res.Totals().Committed), "within the limit, 0 throttled")
	require.ErrorContains(t, errPrefix, "PARITYSYNC_KEY_PREFIX")
	require.ErrorContains(t, errPrefix, s.Prefix)
	require.ErrorContains(t, errRate, "rate_per_minute")
	require.LessOrEqual(t, cs.MaxWindowRequests, cs.Limit)
	require.Zero(t, cs.Throttled)
	require.Equal(t, len(ms), res.Totals().Committed)
}

// oneLineErr is err as the worker's main prints it: the startup error's own line.
func oneLineErr(err error) string {
	if err == nil {
		return "<nil>"
	}
	return strings.ReplaceAll(app.OneLine(err).Error(), "\n", "; ")
}
