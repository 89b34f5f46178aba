package channels_test

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/paritysync/paritysync/channels"
	"github.com/paritysync/paritysync/dial/redistest"
	"github.com/paritysync/paritysync/limiter"
	"github.com/paritysync/paritysync/models"
	"github.com/paritysync/paritysync/otasim/sim"
)

// windowTestWindow is the 50-property test's window: its assertions are relative to
// the window (most in any window, turns, the wait between two requests against the
// slot interval), so the short test window, a tenth of Channex's real 60 s, with
// Channex's limits counted per window.
const windowTestWindow = 6 * time.Second

// windowTestDuration is how long the 50-property test pushes: a little over one
// window, so every window it can see is a full one.
const windowTestDuration = windowTestWindow * 65 / 60

// TestChannexFiftyPropertiesStayWithinTheirWindows pushes a backlog for 50
// properties of one Channex channel through the real limiter (Redis) and client to
// the simulator, in real time, for a little over one window (windowTestWindow).
// Every property keeps within Channex's 10 price-and-restriction and 10
// availability requests in any window, by the simulator's count of arrivals and by
// ours of sends; nothing is throttled; and the properties are served in turn: equal
// counts, and no property waits much longer than its own refill between two
// requests.
//
//	go test -race -run TestChannexFiftyPropertiesStayWithinTheirWindows -v ./channels
func TestChannexFiftyPropertiesStayWithinTheirWindows(t *testing.T) {
	if testing.Short() {
		t.Skip("runs for over a window of real time")
	}
	rdb, prefix := redistest.Client(t, "pstest")
	const nProps = 50
	mapping := models.ChannexMapping{Properties: map[string]models.ChannexProperty{}}
	var props []string
	for i := range nProps {
		p := fmt.Sprintf("prop_%08x", i)
		props = append(props, p)
		mapping.Properties[p] = models.ChannexProperty{
			PropertyID: fmt.Sprintf("%08x-0000-4000-8000-000000000001", i), Currency: "EUR",
			RoomTypes: map[string]string{"DBL": fmt.Sprintf("%08x-0000-4000-8000-000000000002", i)},
			RatePlans: map[string]string{"DBL/BAR": fmt.Sprintf("%08x-0000-4000-8000-000000000003", i)},
		}
	}
	cfg := models.NewChannexChannel("channex_load", mapping)
	cfg.Window = windowTestWindow
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	lim := limiter.New(rdb, []models.ChannelConfig{cfg}, limiter.Options{Prefix: prefix})
	simCfg := cfg
	simCfg.RatePerMinute = models.ChannexRequestsPerMinute
	s := sim.New(sim.Config{Channels: []models.ChannelConfig{simCfg}, StaticTokens: []string{"load-key"}})
	srv := newServer(t, s)
	client := channels.New(srv.Client(), srv.URL, channels.Credentials{cfg.Slug: channels.StaticCredential("load-key")},
		[]models.ChannelConfig{cfg}, 5*time.Second)

	type sent struct {
		prop  string
		fam   models.Family
		at    time.Time
		class channels.Class
	}
	var (
		mu      sync.Mutex
		log     []sent
		maxLate time.Duration
		wg      sync.WaitGroup
		errs    = make(chan error, nProps*3)
	)
	ctx := context.Background()
	start := time.Now()
	deadline := start.Add(windowTestDuration)
	for _, p := range props {
		for _, f := range models.Families {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for v := int64(1); ; {
					now := time.Now()
					if !now.Before(deadline) {
						return
					}
					req := loadRequest(cfg.Slug, p, f, v)
					lr := limiter.Request{Channel: cfg.Slug, Family: f, Property: p, Priority: 3, Cost: 1,
						ID: fmt.Sprintf("%s/%s/%d", p, f, v), Lines: req.Lines}
					dec, err := lim.Reserve(ctx, lr)
					if err != nil {
						errs <- err
						return
					}
					if dec.State != limiter.Send {
						// Holding its slot: wait for it, as a workflow's timer would.
						nap := min(dec.Wait, deadline.Sub(now))
						time.Sleep(nap)
						// How late this goroutine woke: on a loaded machine the test,
						// not the limiter, can miss a turn.
						late := time.Since(now) - nap
						mu.Lock()
						maxLate = max(maxLate, late)
						mu.Unlock()
						continue
					}
					at := time.Now()
					resp, err := client.Push(ctx, req)
					if err != nil {
						errs <- err
						return
					}
					if err := lim.Release(ctx, lr); err != nil {
						errs <- err
						return
					}
					mu.Lock()
					log = append(log, sent{prop: p, fam: f, at: at, class: resp.Class})
					mu.Unlock()
					v++
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}

	st := s.Stats()[cfg.Slug]
	perProp := map[string]int{}
	perEndpoint := map[string][]time.Time{}
	lastAt := map[string][]time.Time{}
	committed := 0
	for _, e := range log {
		perProp[e.prop]++
		k := e.prop + " " + models.ChannexEndpoint(e.fam)
		perEndpoint[k] = append(perEndpoint[k], e.at)
		lastAt[e.prop] = append(lastAt[e.prop], e.at)
		if e.class == channels.ClassCommitted {
			committed++
		}
	}
	maxWindow := 0
	for k, ts := range perEndpoint {
		if n := maxInWindow(ts, windowTestWindow); n > maxWindow {
			maxWindow = n
		}
		if n := maxInWindow(ts, windowTestWindow); n > models.ChannexRequestsPerMinute {
			t.Errorf("%s: %d requests in one %s window", k, n, windowTestWindow)
		}
	}
	counts := make([]int, 0, len(perProp))
	for _, n := range perProp {
		counts = append(counts, n)
	}
	slices.Sort(counts)
	var longestGap time.Duration
	for _, ts := range lastAt {
		sort.Slice(ts, func(i, j int) bool { return ts[i].Before(ts[j]) })
		for i := 1; i < len(ts); i++ {
			longestGap = max(longestGap, ts[i].Sub(ts[i-1]))
		}
	}
	elapsed := time.Since(start)
	t.Logf("50-property Channex window: %d requests in %s (%.1f/s), %d committed, %d throttled by the simulator",
		len(log), elapsed.Round(time.Second), float64(len(log))/elapsed.Seconds(), committed, st.Throttled)
	t.Logf("per property: min %d, max %d requests; most in any %s per property and endpoint: %d by our sends, %d by the simulator's arrivals (limit %d); longest wait between two requests of one property: %s",
		counts[0], counts[len(counts)-1], windowTestWindow, maxWindow, st.MaxWindowRequests, models.ChannexRequestsPerMinute, longestGap.Round(time.Millisecond))

	if len(perProp) != nProps {
		t.Errorf("%d of %d properties were served", len(perProp), nProps)
	}
	if st.Throttled != 0 || st.MaxWindowRequests > models.ChannexRequestsPerMinute || committed != len(log) {
		t.Errorf("simulator: %d throttled, %d arrivals in one window; %d of %d committed", st.Throttled, st.MaxWindowRequests, committed, len(log))
	}
	// Turns are the limiter's; a goroutine that wakes late for its slot (a loaded
	// machine) loses time the limiter never saw, so the bounds allow for the
	// latest wake-up measured, and the one-request spread holds only when every
	// wake-up was on time.
	t.Logf("latest wake-up after a slot: %s", maxLate.Round(time.Millisecond))
	// A window frees an endpoint's slot every tenth of it (10 per window plus the
	// limiter's margin): 6 s at Channex's real 60 s.
	slot := windowTestWindow / models.ChannexRequestsPerMinute
	missed := 0 // turns a late wake-up can cost: one per slot interval it overslept
	if maxLate > slot/6 {
		missed = 1 + int(maxLate/slot)
	}
	if counts[len(counts)-1]-counts[0] > 1+missed {
		t.Errorf("properties not served in turn: between %d and %d requests each", counts[0], counts[len(counts)-1])
	}
	// Every property is served about once a slot interval (8 s at the real window).
	if longestGap > slot*4/3+2*maxLate {
		t.Errorf("a property waited %s between two requests", longestGap)
	}
}

// maxInWindow is the most times within any span of length w (half-open).
func maxInWindow(ts []time.Time, w time.Duration) int { return models.MostInWindowAt(ts, w) }

// loadRequest is version v of one night's value for property p in family f.
func loadRequest(channel, p string, f models.Family, v int64) models.ChannelRequest {
	l := models.ARILine{RoomTypeCode: "DBL", RatePlanCode: "BAR", From: d("2030-04-10"), To: d("2030-04-10"), Version: v}
	switch f {
	case models.FamilyRates:
		l.Amount, l.Currency = money(fmt.Sprintf("%d.50", 100+v)), "EUR"
	case models.FamilyAvailability:
		l.Inventory = ip(int(v % 10))
	default:
		l.StopSell = bp(v%2 == 0)
	}
	return models.ChannelRequest{Channel: channel, PropertyID: p, Family: f, Priority: 3, Lines: []models.ARILine{l}}
}
