// Command loadgen is intake's load benchmark: a number of concurrent PMS clients
// (50 by default) post small batches of webhook changes to POST /v1/changes for a
// while (2 minutes by default), then it waits until every accepted change has an
// outcome at GET /v1/changes/{id}. It reports latency (p50, p99), requests and
// accepted changes per second, the 429s and whether each carried Retry-After, how
// many updates carried the changes into the smoothers (intake's /metrics), and
// lost = accepted - with an outcome, which must be 0 (exit status 1 otherwise).
//
//	make bench-intake                      # brings up a stack of its own and runs this
//	go run ./intake/loadgen -url http://127.0.0.1:8080 -key-file .run/api.key -duration 10s
//
// The API key is read from a file, never from the command line. The load generator
// is vegeta used as a library: its attacker keeps exactly -clients requests in
// flight (a closed loop: each client posts again as soon as it is answered), which
// is what a fleet of PMS webhooks does to intake when it falls behind.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/signal"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "loadgen:", err)
		os.Exit(1)
	}
}

// options are the command's flags.
type options struct {
	url             string
	keyFile         string
	duration        time.Duration
	clients         int
	minChanges      int
	maxChanges      int
	channels        []string
	properties      int
	outcomeDeadline time.Duration
	seed            uint64
	honour          bool
}

func parseFlags(args []string) (options, error) {
	var o options
	fs := flag.NewFlagSet("loadgen", flag.ContinueOnError)
	fs.StringVar(&o.url, "url", "http://127.0.0.1:8080", "intake's base URL")
	fs.StringVar(&o.keyFile, "key-file", ".run/api.key", "file holding the API key (kept off the command line)")
	fs.DurationVar(&o.duration, "duration", 2*time.Minute, "how long the clients post")
	fs.IntVar(&o.clients, "clients", 50, "concurrent PMS clients (requests in flight)")
	fs.IntVar(&o.minChanges, "min-changes", 1, "fewest changes in one post")
	fs.IntVar(&o.maxChanges, "max-changes", 5, "most changes in one post")
	chans := fs.String("channels", "booking_com,expedia,agoda,ota_demo", "channels the changes go to (comma-separated)")
	fs.IntVar(&o.properties, "properties", 12, "properties the changes are spread over")
	fs.DurationVar(&o.outcomeDeadline, "outcome-deadline", 10*time.Minute, "how long to wait for every accepted change's outcome")
	fs.Uint64Var(&o.seed, "seed", uint64(time.Now().UnixNano()), "seed of the generated changes")
	fs.BoolVar(&o.honour, "honour-retry-after", false,
		"behave like a PMS that honours Retry-After: after a 429 no client posts until its Retry-After has passed")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	for _, c := range strings.Split(*chans, ",") {
		if c = strings.TrimSpace(c); c != "" {
			o.channels = append(o.channels, c)
		}
	}
	switch {
	case o.duration <= 0:
		return o, errors.New("-duration: must be positive")
	case o.clients <= 0:
		return o, errors.New("-clients: must be positive")
	case o.minChanges < 1 || o.maxChanges < o.minChanges:
		return o, errors.New("-min-changes and -max-changes: want 1 <= min <= max")
	case len(o.channels) == 0:
		return o, errors.New("-channels: name at least one")
	case o.properties < 1:
		return o, errors.New("-properties: must be positive")
	}
	o.url = strings.TrimRight(o.url, "/")
	return o, nil
}

func run(ctx context.Context, args []string, out io.Writer) error {
	o, err := parseFlags(args)
	if err != nil {
		return err
	}
	raw, err := os.ReadFile(o.keyFile)
	if err != nil {
		return fmt.Errorf("-key-file: %w", err)
	}
	key := strings.TrimSpace(string(raw))
	if key == "" {
		return fmt.Errorf("-key-file %s: empty", o.keyFile)
	}
	hdr := http.Header{"Authorization": {"Bearer " + key}, "Content-Type": {"application/json"}}

	gen := newGenerator(o)
	atk := vegeta.NewAttacker(
		vegeta.Workers(uint64(o.clients)), vegeta.MaxWorkers(uint64(o.clients)),
		vegeta.Connections(o.clients), vegeta.Timeout(60*time.Second), vegeta.KeepAlive(true),
		vegeta.MaxBody(4<<20))
	targeter := func(t *vegeta.Target) error {
		t.Method, t.URL, t.Header, t.Body = http.MethodPost, o.url+"/v1/changes", hdr, gen.body()
		return nil
	}
	fmt.Fprintf(out, "loadgen: %d clients posting %d-%d changes each to %s/v1/changes for %s (channels %s, %d properties)\n",
		o.clients, o.minChanges, o.maxChanges, o.url, o.duration, strings.Join(o.channels, ","), o.properties)

	var tally tally
	var metrics vegeta.Metrics
	stopped := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
			atk.Stop()
		case <-stopped:
		}
	}()
	// The zero pacer is "as fast as the workers go": with workers = max workers,
	// exactly o.clients requests are in flight at any time.
	var pacer vegeta.Pacer = vegeta.ConstantPacer{}
	notBefore := &atomic.Int64{} // unix nanoseconds; 0 while no Retry-After is pending
	if o.honour {
		pacer = retryAfterPacer{notBefore}
	}
	for res := range atk.Attack(targeter, pacer, o.duration, "intake") {
		metrics.Add(res)
		tally.add(res)
		if s, err := strconv.Atoi(res.Headers.Get("Retry-After")); err == nil && res.Code == http.StatusTooManyRequests {
			until := time.Now().Add(time.Duration(s) * time.Second).UnixNano()
			for cur := notBefore.Load(); until > cur && !notBefore.CompareAndSwap(cur, until); cur = notBefore.Load() {
			}
		}
	}
	close(stopped)
	metrics.Close()
	if ctx.Err() != nil {
		return ctx.Err()
	}

	fmt.Fprintln(out, "\n== load")
	fmt.Fprintf(out, "requests          %d in %s (%.1f/s)\n", metrics.Requests, metrics.Duration.Round(time.Millisecond), metrics.Rate)
	fmt.Fprintf(out, "latency           p50 %s  p99 %s  max %s\n", metrics.Latencies.P50.Round(time.Millisecond),
		metrics.Latencies.P99.Round(time.Millisecond), metrics.Latencies.Max.Round(time.Millisecond))
	fmt.Fprintf(out, "status codes      %s\n", formatCodes(metrics.StatusCodes))
	secs := metrics.Duration.Seconds()
	fmt.Fprintf(out, "changes sent      %d (%.1f/s)\n", gen.sent.Load(), float64(gen.sent.Load())/secs)
	fmt.Fprintf(out, "changes accepted  %d (%.1f/s)  rejected %d  refused %d\n", len(tally.accepted),
		float64(len(tally.accepted))/secs, tally.rejected, tally.refused)
	fmt.Fprintf(out, "429 answers       %d, with Retry-After %d (%s)\n", tally.tooMany, tally.withRetryAfter, tally.retryAfterRange())
	for _, e := range tally.errors() {
		fmt.Fprintln(out, "error            ", e)
	}
	if g, err := readGroups(ctx, o.url); err == nil && g.updates > 0 {
		fmt.Fprintf(out, "smoother updates  %.0f (%.1f changes, %.1f posts each on average)\n",
			g.updates, g.changes/g.updates, g.posts/g.updates)
	}

	fmt.Fprintf(out, "\n== outcomes (deadline %s)\n", o.outcomeDeadline)
	t0 := time.Now()
	outcomes, err := awaitOutcomes(ctx, o, hdr, tally.accepted, out)
	if err != nil {
		return err
	}
	with := 0
	kinds := map[string]int{}
	for _, k := range outcomes {
		if k != "" {
			with++
			kinds[k]++
		}
	}
	lost := len(tally.accepted) - with
	fmt.Fprintf(out, "with an outcome    %d of %d accepted after %s (%s)\n", with, len(tally.accepted),
		time.Since(t0).Round(time.Second), formatCodes(kinds))
	fmt.Fprintf(out, "lost               %d\n", lost)

	var problems []string
	if lost != 0 {
		problems = append(problems, fmt.Sprintf("%d accepted changes have no outcome", lost))
	}
	if tally.tooMany != tally.withRetryAfter {
		problems = append(problems, fmt.Sprintf("%d 429 answers without a valid Retry-After", tally.tooMany-tally.withRetryAfter))
	}
	if tally.unexpected > 0 {
		problems = append(problems, fmt.Sprintf("%d answers other than 202 and 429", tally.unexpected))
	}
	if tally.tooMany == 0 {
		fmt.Fprintln(out, "note: no 429 — the smoothers never filled; lower PARITYSYNC_SMOOTHER_MAX_PENDING or add clients")
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "; "))
	}
	return nil
}

// groups sums intake's per-channel submitter histograms over the channels.
type groups struct{ updates, changes, posts float64 }

// readGroups reads intake's /metrics (no key needed) for the updates its channel
// submitters sent the smoothers and the changes and posts they carried.
func readGroups(ctx context.Context, base string) (groups, error) {
	var g groups
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/metrics", nil)
	if err != nil {
		return g, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return g, fmt.Errorf("read intake's metrics: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return g, fmt.Errorf("read intake's metrics: %w", err)
	}
	for _, line := range strings.Split(string(body), "\n") {
		name, rest, ok := strings.Cut(line, "{")
		if !ok {
			continue
		}
		fields := strings.Fields(rest)
		v, err := strconv.ParseFloat(fields[len(fields)-1], 64)
		if err != nil {
			continue
		}
		switch name {
		case "paritysync_intake_submit_group_size_count":
			g.updates += v
		case "paritysync_intake_submit_group_size_sum":
			g.changes += v
		case "paritysync_intake_submit_group_posts_sum":
			g.posts += v
		}
	}
	return g, nil
}

// generator makes realistic webhook posts: changes to random cells of a few
// properties, room types and rate plans across the channels, each one endpoint
// family (a rate, an availability or a restriction), with a version that only
// grows, so a later change of a cell always supersedes an earlier one.
type generator struct {
	o       options
	mu      sync.Mutex
	rnd     *rand.Rand
	run     string
	n       atomic.Int64
	sent    atomic.Int64
	version atomic.Int64
	today   time.Time
}

func newGenerator(o options) *generator {
	g := &generator{o: o, rnd: rand.New(rand.NewPCG(o.seed, o.seed^0x9e3779b97f4a7c15)),
		run: strconv.FormatInt(time.Now().Unix(), 36), today: time.Now().UTC()}
	// Versions start above any earlier run's against the same database.
	g.version.Store(time.Now().UnixMilli() * 1000)
	return g
}

var (
	roomTypes = []string{"DLXKING", "STDQUEEN", "SUITE"}
	ratePlans = []string{"BAR_FLEX", "BAR_NR"}
)

// change is one mutation as a PMS sends it.
type change struct {
	ID           string `json:"id"`
	PropertyID   string `json:"property_id"`
	RoomTypeCode string `json:"room_type_code"`
	RatePlanCode string `json:"rate_plan_code"`
	Channel      string `json:"channel"`
	StayDate     string `json:"stay_date"`
	Amount       string `json:"amount,omitempty"`
	Currency     string `json:"currency,omitempty"`
	Inventory    *int   `json:"inventory,omitempty"`
	StopSell     *bool  `json:"stop_sell,omitempty"`
	MinLOS       *int   `json:"min_los,omitempty"`
	Version      int64  `json:"version"`
	Priority     int    `json:"priority,omitempty"`
}

func (g *generator) body() []byte {
	g.mu.Lock()
	n := g.o.minChanges + g.rnd.IntN(g.o.maxChanges-g.o.minChanges+1)
	cs := make([]change, n)
	for i := range cs {
		c := change{
			ID:           fmt.Sprintf("lg-%s-%d", g.run, g.n.Add(1)),
			PropertyID:   fmt.Sprintf("prop_%08x", 0xa0000000+g.rnd.IntN(g.o.properties)),
			RoomTypeCode: roomTypes[g.rnd.IntN(len(roomTypes))],
			RatePlanCode: ratePlans[g.rnd.IntN(len(ratePlans))],
			Channel:      g.o.channels[g.rnd.IntN(len(g.o.channels))],
			StayDate:     g.today.AddDate(0, 0, 1+g.rnd.IntN(180)).Format(time.DateOnly),
			Version:      g.version.Add(1),
			Priority:     []int{1, 2, 3, 3, 3, 4, 5}[g.rnd.IntN(7)],
		}
		switch g.rnd.IntN(3) {
		case 0:
			c.Amount, c.Currency = fmt.Sprintf("%d.%02d", 80+g.rnd.IntN(300), g.rnd.IntN(100)), "EUR"
		case 1:
			inv := g.rnd.IntN(20)
			c.Inventory = &inv
		default:
			if g.rnd.IntN(2) == 0 {
				stop := g.rnd.IntN(4) == 0
				c.StopSell = &stop
			} else {
				los := 1 + g.rnd.IntN(4)
				c.MinLOS = &los
			}
		}
		cs[i] = c
	}
	g.mu.Unlock()
	g.sent.Add(int64(n))
	b, _ := json.Marshal(cs) // plain structs: cannot fail
	return b
}

// answer is what the loadgen reads of a 202 answer or a 429 problem.
type answer struct {
	Changes []struct {
		ID         string `json:"id"`
		Status     string `json:"status"`
		RetryAfter int    `json:"retry_after"`
	} `json:"changes"`
}

// tally counts the answers. add is called from one goroutine.
type tally struct {
	accepted       []string
	rejected       int
	refused        int
	tooMany        int
	withRetryAfter int
	minRetry       int
	maxRetry       int
	unexpected     int
	errs           map[string]int
}

func (t *tally) add(r *vegeta.Result) {
	if t.errs == nil {
		t.errs = map[string]int{}
	}
	switch r.Code {
	case http.StatusAccepted, http.StatusTooManyRequests:
	default:
		t.unexpected++
		msg := r.Error
		if msg == "" {
			msg = fmt.Sprintf("%d %s", r.Code, strings.TrimSpace(string(r.Body)))
		}
		if len(msg) > 200 {
			msg = msg[:200]
		}
		t.errs[msg]++
		return
	}
	if r.Code == http.StatusTooManyRequests {
		t.tooMany++
		if s, err := strconv.Atoi(r.Headers.Get("Retry-After")); err == nil && s > 0 {
			t.withRetryAfter++
			if t.minRetry == 0 || s < t.minRetry {
				t.minRetry = s
			}
			t.maxRetry = max(t.maxRetry, s)
		}
	}
	var a answer
	if err := json.Unmarshal(r.Body, &a); err != nil {
		t.unexpected++
		t.errs["unreadable answer: "+err.Error()]++
		return
	}
	for _, c := range a.Changes {
		switch c.Status {
		case "accepted":
			t.accepted = append(t.accepted, c.ID)
		case "rejected":
			t.rejected++
		case "refused":
			t.refused++
		}
	}
}

func (t *tally) retryAfterRange() string {
	if t.withRetryAfter == 0 {
		return "none"
	}
	return fmt.Sprintf("%d..%d s", t.minRetry, t.maxRetry)
}

func (t *tally) errors() []string {
	var out []string
	for e, n := range t.errs {
		out = append(out, fmt.Sprintf("%dx %s", n, e))
	}
	sort.Strings(out)
	return out
}

// awaitOutcomes asks GET /v1/changes/{id} for every id until each has an outcome
// or the deadline passes; it returns each id's first outcome ("" for none).
func awaitOutcomes(ctx context.Context, o options, hdr http.Header, ids []string, out io.Writer) (map[string]string, error) {
	ctx, cancel := context.WithTimeout(ctx, o.outcomeDeadline)
	defer cancel()
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 16}}
	found := make(map[string]string, len(ids))
	lookupErrs := 0
	var lastErr error
	defer func() {
		if lookupErrs > 0 {
			fmt.Fprintf(out, "outcome look-ups that failed and were asked again: %d (last: %v)\n", lookupErrs, lastErr)
		}
	}()
	waiting := append([]string(nil), ids...)
	for pass := 1; len(waiting) > 0; pass++ {
		var mu sync.Mutex
		var next []string
		work := make(chan string)
		var wg sync.WaitGroup
		for range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for id := range work {
					kind, err := outcomeOf(ctx, client, o.url, hdr, id)
					mu.Lock()
					switch {
					case err != nil:
						// Asked again next pass: a loaded database is not a lost change.
						if ctx.Err() == nil {
							lookupErrs++
							lastErr = err
						}
						next = append(next, id)
					case kind == "":
						next = append(next, id)
					default:
						found[id] = kind
					}
					mu.Unlock()
				}
			}()
		}
	feed:
		for _, id := range waiting {
			select {
			case work <- id:
			case <-ctx.Done():
				break feed
			}
		}
		close(work)
		wg.Wait()
		if ctx.Err() != nil {
			break
		}
		waiting = next
		if pass%6 == 1 || len(waiting) == 0 {
			fmt.Fprintf(out, "%s  %d of %d have an outcome\n", time.Now().Format(time.TimeOnly), len(found), len(ids))
		}
		if len(waiting) > 0 {
			select {
			case <-time.After(5 * time.Second):
			case <-ctx.Done():
			}
		}
	}
	if err := context.Cause(ctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return nil, err
	}
	return found, nil
}

func outcomeOf(ctx context.Context, client *http.Client, base string, hdr http.Header, id string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/v1/changes/"+id, nil)
	if err != nil {
		return "", err
	}
	req.Header.Set("Authorization", hdr.Get("Authorization"))
	resp, err := client.Do(req)
	if err != nil {
		return "", fmt.Errorf("GET /v1/changes/%s: %w", id, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return "", fmt.Errorf("GET /v1/changes/%s: %d %s", id, resp.StatusCode, b)
	}
	var list struct {
		Outcomes []struct {
			Outcome string `json:"outcome"`
		} `json:"outcomes"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
		return "", fmt.Errorf("GET /v1/changes/%s: %w", id, err)
	}
	if len(list.Outcomes) == 0 {
		return "", nil
	}
	return list.Outcomes[0].Outcome, nil
}

func formatCodes[K comparable](m map[K]int) string {
	var parts []string
	for k, n := range m {
		parts = append(parts, fmt.Sprintf("%v:%d", k, n))
	}
	sort.Strings(parts)
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, " ")
}

// retryAfterPacer sends as fast as the clients go, except while a 429's
// Retry-After is pending: then nobody posts until it has passed.
type retryAfterPacer struct{ notBefore *atomic.Int64 }

func (p retryAfterPacer) Pace(time.Duration, uint64) (time.Duration, bool) {
	return time.Until(time.Unix(0, p.notBefore.Load())), false
}

func (p retryAfterPacer) Rate(time.Duration) float64 { return 0 }
