package main

import (
	"container/heap"
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"

	"github.com/paritysync/paritysync/dial"
	"github.com/paritysync/paritysync/limiter"
	"github.com/paritysync/paritysync/models"
)

func (c *cli) simulateCmd() *cobra.Command {
	var file string
	var speed int
	cmd := &cobra.Command{
		Use:   "simulate --trace FILE [--speed N]",
		Short: "Replay a request trace through the real limiter, sped up, and print sends per minute",
		Long: `Replay a trace of channel requests through the limiter the workers run — the same
Lua script, on the configured Redis (REDIS_URL) under a key prefix of its own,
deleted at the end — against the configured channels, and print per minute how many
requests arrived, how many were sent, how many of those waited, and the longest
wait. A request the limiter gives a slot waits for it, as a workflow's timer would;
a request the daily quota refuses is counted as refused. No channel is called and
no key of the workers is touched.

The replay runs --speed times faster than the trace (60: a minute of trace takes a
second): every window, the limiter's margin and the trace's times are divided by it,
so each time it reports (a request's slot) is exact to about --speed milliseconds.

The trace is a CSV with a header row: at_seconds (offset from the start of the
trace), channel, family (rates, availability or restrictions), property_id, and
optionally priority (1 urgent … 5 bulk, default 3) and cost (default 1).`,
		Example: `  starter simulate --trace requests.csv
  starter simulate --trace requests.csv --speed 10 --output json`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			trace, err := readTrace(file)
			if err != nil {
				return dataError(err)
			}
			if speed < 1 {
				return usageError(fmt.Sprintf("--speed %d: want >= 1", speed))
			}
			d, err := c.deps()
			if err != nil {
				return err
			}
			defer d.close()
			rdb, err := d.redis(cmd.Context())
			if err != nil {
				return err
			}
			res, err := simulateTrace(cmd.Context(), rdb, d.channels, trace, speed)
			if err != nil {
				return err
			}
			return c.printSimulation(res)
		},
	}
	cmd.Flags().StringVar(&file, "trace", "", "the request trace, one request per row, with a header row (required)")
	speedFlag(cmd, &speed)
	required(cmd, "trace")
	return cmd
}

// traceRequest is one row of a trace.
type traceRequest struct {
	At       time.Duration
	Channel  string
	Family   models.Family
	Property string
	Priority int
	Cost     int
}

// readTrace reads a trace CSV; every error names the line and the column.
func readTrace(path string) ([]traceRequest, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("trace: %w", err)
	}
	defer f.Close()
	r := csv.NewReader(f)
	r.FieldsPerRecord = -1
	header, err := r.Read()
	if err != nil {
		return nil, fmt.Errorf("trace %s: header: %w", path, err)
	}
	col := map[string]int{}
	for i, h := range header {
		col[strings.TrimSpace(h)] = i
	}
	for _, need := range []string{"at_seconds", "channel", "family", "property_id"} {
		if _, ok := col[need]; !ok {
			return nil, fmt.Errorf("trace %s: header: column %s is required", path, need)
		}
	}
	var out []traceRequest
	for line := 2; ; line++ {
		rec, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("trace %s: %w", path, err)
		}
		get := func(name string) string {
			if i, ok := col[name]; ok && i < len(rec) {
				return strings.TrimSpace(rec[i])
			}
			return ""
		}
		at, err := strconv.ParseFloat(get("at_seconds"), 64)
		if err != nil || at < 0 {
			return nil, fmt.Errorf("trace %s: line %d: at_seconds: want seconds >= 0, got %q", path, line, get("at_seconds"))
		}
		t := traceRequest{At: time.Duration(at * float64(time.Second)), Channel: get("channel"),
			Family: models.Family(get("family")), Property: get("property_id"), Priority: models.PriorityDefault, Cost: 1}
		if !slices.Contains(models.Families, t.Family) {
			return nil, fmt.Errorf("trace %s: line %d: family: want rates, availability or restrictions, got %q", path, line, t.Family)
		}
		for _, n := range []struct {
			name     string
			dst      *int
			min, max int
		}{{"priority", &t.Priority, models.PriorityUrgent, models.PriorityBulk}, {"cost", &t.Cost, 1, 1 << 30}} {
			if v := get(n.name); v != "" {
				x, err := strconv.Atoi(v)
				if err != nil || x < n.min || x > n.max {
					return nil, fmt.Errorf("trace %s: line %d: %s: want %d..%d, got %q", path, line, n.name, n.min, n.max, v)
				}
				*n.dst = x
			}
		}
		out = append(out, t)
	}
	return out, nil
}

// simMinute is one minute of a simulation.
type simMinute struct {
	Minute   int     `json:"minute"`
	Arrived  int     `json:"arrived"`
	Sent     int     `json:"sent"`
	Delayed  int     `json:"delayed"`
	MaxWaitS float64 `json:"max_wait_seconds"`
	Refused  int     `json:"refused"`
}

// simChannel is one channel's simulation.
type simChannel struct {
	Channel      string      `json:"channel"`
	Limit        int         `json:"rate_per_minute"`
	Burst        int         `json:"burst"`
	Requests     int         `json:"requests"`
	Sent         int         `json:"sent"`
	Refused      int         `json:"refused"`
	MostInWindow int         `json:"most_in_any_60s"`
	Minutes      []simMinute `json:"minutes"`
	sends        []time.Duration
	// sendAt is when each sent request of the trace (by index) went out.
	sendAt map[int]time.Duration
}

// simEvent is a request asking the limiter at a point of trace time: its arrival,
// or the slot (or the end of the wait) the limiter gave it; held is true for the
// slot the limiter holds for it.
type simEvent struct {
	at   time.Duration
	req  int
	seq  int
	held bool
}

type simQueue []simEvent

func (q simQueue) Len() int { return len(q) }
func (q simQueue) Less(i, j int) bool {
	if q[i].at != q[j].at {
		return q[i].at < q[j].at
	}
	return q[i].seq < q[j].seq
}
func (q simQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *simQueue) Push(x any)   { *q = append(*q, x.(simEvent)) }
func (q *simQueue) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}

// DefaultSimSpeed is how many times faster than the trace a simulation runs: a
// minute of trace takes a second.
const DefaultSimSpeed = 60

// simMargin, simLease and simMaxAge are the limiter's own defaults (limiter.New)
// of the options that measure time, which a simulation divides by its speed;
// simLateness is the most a replayed request may come late to its slot.
const (
	simMargin   = 500 * time.Millisecond
	simLease    = 30 * time.Second
	simMaxAge   = 10 * time.Minute
	simLateness = 100 * time.Millisecond
)

// simulateTrace replays trace through the limiter the workers run — the same Lua
// script, on the Redis rdb, under a key prefix of its own that it deletes at the
// end — speed times faster than the trace: each channel's window and margin, the
// limiter's lease and age, and the trace's own times are divided by speed. Each
// request asks when it arrives and again when its held slot (or a back-off)
// comes, and is sent when the limiter says so. The times reported are trace
// times: when a request asked and was let go at once, else the slot the limiter
// held for it (the wait it gave, from when it was asked), each exact to about
// speed milliseconds.
//
// The limiter counts a channel's window and margin as one span, (slot − window −
// margin, slot]; the margin alone is how late a request may come to its slot and
// keep it. Replayed, that span is divided by speed and split anew: the margin is
// simLateness of real time (less on a very short window), so a busy machine does
// not lose a slot a worker would have kept, and the window is the rest.
func simulateTrace(ctx context.Context, rdb redis.UniversalClient, chs []models.ChannelConfig, trace []traceRequest,
	speed int) (res []simChannel, err error) {
	if speed < 1 {
		return nil, fmt.Errorf("simulate: speed %d: want >= 1", speed)
	}
	k := time.Duration(speed)
	margin := simLateness
	for _, c := range chs {
		margin = min(margin, (c.WindowLength()+simMargin)/k/4)
	}
	margin = max(margin, time.Millisecond)
	scaled := make([]models.ChannelConfig, len(chs))
	for i, c := range chs {
		c.Window = max((c.WindowLength()+simMargin)/k-margin, time.Millisecond)
		scaled[i] = c
	}
	prefix := "simulate:" + uuid.NewString() + ":"
	lim := limiter.New(rdb, scaled, limiter.Options{Prefix: prefix,
		Margin: margin, Lease: max(simLease/k, time.Millisecond), MaxAge: max(simMaxAge/k, time.Millisecond)})
	defer func() {
		// The keys expire on their own; deleting them leaves nothing behind now.
		cleanup, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		keys, e := dial.ScanKeys(cleanup, rdb, prefix+"*")
		for _, key := range keys {
			if e == nil {
				e = rdb.Del(cleanup, key).Err()
			}
		}
		if e != nil && err == nil {
			err = fmt.Errorf("simulate: delete the keys under %s: %w", prefix, e)
		}
	}()
	byChannel := models.ChannelMap(chs)

	out := map[string]*simChannel{}
	minute := func(sc *simChannel, at time.Duration) *simMinute {
		i := int(at / time.Minute)
		for len(sc.Minutes) <= i {
			sc.Minutes = append(sc.Minutes, simMinute{Minute: len(sc.Minutes)})
		}
		return &sc.Minutes[i]
	}
	q := &simQueue{}
	for i, t := range trace {
		cfg, ok := byChannel[t.Channel]
		if !ok {
			return nil, fmt.Errorf("simulate: trace row %d: channel %q is not configured", i+1, t.Channel)
		}
		sc := out[t.Channel]
		if sc == nil {
			sc = &simChannel{Channel: t.Channel, Limit: cfg.RatePerMinute, Burst: cfg.Burst}
			out[t.Channel] = sc
		}
		sc.Requests++
		minute(sc, t.At).Arrived++
		heap.Push(q, simEvent{at: t.At, req: i, seq: i})
	}
	timer := time.NewTimer(0)
	defer timer.Stop()
	start, seq := time.Now(), len(trace)
	for q.Len() > 0 {
		ev := heap.Pop(q).(simEvent)
		if wait := time.Until(start.Add(ev.at / k)); wait > 0 {
			timer.Reset(wait)
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-timer.C:
			}
		}
		now := time.Since(start) * k
		t := trace[ev.req]
		r := limiter.Request{Channel: t.Channel, Family: t.Family, Property: t.Property, Priority: t.Priority,
			Cost: t.Cost, ID: strconv.Itoa(ev.req)}
		d, err := lim.Reserve(ctx, r)
		if err != nil {
			return nil, fmt.Errorf("simulate: %w", err)
		}
		sc := out[t.Channel]
		switch d.State {
		case limiter.Send:
			// A held slot is sent at that slot, which is what the limiter counts;
			// a request due when it asked is sent then, and a replay later than its
			// resolution (a millisecond of real time) to ask is not a wait.
			if ev.held || now-ev.at < k*time.Millisecond {
				now = ev.at
			}
			sc.Sent++
			sc.sends = append(sc.sends, now)
			mm := minute(sc, now)
			mm.Sent++
			if wait := now - t.At; wait > 0 {
				mm.Delayed++
				mm.MaxWaitS = max(mm.MaxWaitS, wait.Seconds())
			}
			if sc.sendAt == nil {
				sc.sendAt = make(map[int]time.Duration)
			}
			sc.sendAt[ev.req] = now
			if err := lim.Release(ctx, r); err != nil {
				return nil, fmt.Errorf("simulate: %w", err)
			}
		case limiter.Quota:
			sc.Refused++
			minute(sc, now).Refused++
		default:
			seq++
			heap.Push(q, simEvent{at: now + max(d.Wait, time.Millisecond)*k, req: ev.req, seq: seq, held: d.State == limiter.Wait})
		}
	}
	for _, slug := range sortedChannelKeys(out) {
		sc := out[slug]
		sc.MostInWindow = mostIn(sc.sends, time.Minute)
		res = append(res, *sc)
	}
	return res, nil
}

func sortedChannelKeys(m map[string]*simChannel) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// speedFlag adds --speed, how many times faster than real time a simulation runs.
func speedFlag(cmd *cobra.Command, speed *int) {
	cmd.Flags().IntVar(speed, "speed", DefaultSimSpeed,
		"run the limiter this many times faster than real time (a minute of trace per 60/N seconds)")
}

// mostIn is the most times in any window of length w (counted as the tests count).
func mostIn(ts []time.Duration, w time.Duration) int { return models.MostInWindow(ts, w) }

func (c *cli) printSimulation(res []simChannel) error {
	if c.json() {
		return c.writeJSON(res)
	}
	for _, sc := range res {
		fmt.Fprintf(c.stdout, "%s (%d/min, burst %d): %d requests, %d sent, %d refused by the quota; most in any 60 s: %d\n",
			sc.Channel, sc.Limit, sc.Burst, sc.Requests, sc.Sent, sc.Refused, sc.MostInWindow)
		t := newTable(c.stdout, "  minute\tarrived\tsent\tdelayed\tmax wait\trefused", 0)
		for _, m := range sc.Minutes {
			t.row("  %d\t%d\t%d\t%d\t%s\t%d", m.Minute, m.Arrived, m.Sent, m.Delayed,
				seconds(m.MaxWaitS).Round(100*time.Millisecond), m.Refused)
		}
		if err := t.flush(); err != nil {
			return err
		}
	}
	return nil
}
