package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"

	"github.com/paritysync/paritysync/e2e/stack"
	"github.com/paritysync/paritysync/models"
	"github.com/paritysync/paritysync/workflows"
)

// throughput compares the push pipeline with limits out of the way (three channels
// at 100,000/min) against the same workflows, on the same worker options, whose
// PushRequest does nothing. One run of a side is 2,865 one-line requests on a fresh
// batch id (new versions and prices, so every run sends new content). There are two
// no-op sides: noopChainedPush delivers the requests a push is handed after its own
// as PushRequest does when their slots are due at once (it does here), so the
// workflows run as many activities per request as on the real side; noopPush, the
// comparison until 2026-12-02, runs one activity per request and so does more
// workflow work than the real side. The runs go chained no-op, real, one-per-request
// no-op, … for PARITYSYNC_BENCH_PAIRS rounds (3), since on a shared 2-core machine
// one side alone varies by a third from run to run. The rows give each round's
// ratio (no-op time / real time) against either no-op, their median, and the total
// requests/s of each side; the log gives each run's CPU per request in this process
// (worker, no-op workers and simulator), the dev server, and the redis-server and
// postgres processes alive at its end (machine-wide: other tests' share included). PARITYSYNC_BENCH_PROFILE names a directory that gets a CPU profile of
// each run.
func (b *bench) throughput() {
	const n = 2865
	rounds := 3
	if v := os.Getenv("PARITYSYNC_BENCH_PAIRS"); v != "" {
		var err error
		rounds, err = strconv.Atoi(v)
		require.NoError(b.t, err, "PARITYSYNC_BENCH_PAIRS")
	}
	profiles := os.Getenv("PARITYSYNC_BENCH_PROFILE")
	chs := map[string]stack.Channel{}
	for _, slug := range []string{"booking_com", "expedia", "agoda"} {
		chs[slug] = stack.Channel{PerMinute: 100000, Burst: 1000, MaxLines: 1}
	}
	s := b.stack(stack.Options{Channels: chs})
	chainedQueue := b.noopWorker(s, noopChainedPush, "noopchained")
	noopQueue := b.noopWorker(s, noopPush, "noop")
	base := time.Now().Unix()

	k := 0
	timeIt := func(side, queue string) time.Duration {
		// 2,865 one-line requests over three channels; run k's versions and prices
		// are its own.
		k++
		var ms []models.Mutation
		for c, slug := range []string{"booking_com", "expedia", "agoda"} {
			ms = append(ms, rateChanges(slug, 5, 191, base+int64(k), 3+c%2, fmt.Sprintf("%d.00", 140+k))...)
		}
		require.Len(b.t, ms, n)
		id := "bench-tp-" + uuid.NewString()[:8]
		if profiles != "" {
			f, err := os.Create(filepath.Join(profiles, fmt.Sprintf("throughput-%d-%s.cpu.pprof", k, side)))
			require.NoError(b.t, err)
			require.NoError(b.t, pprof.StartCPUProfile(f))
			defer func() { pprof.StopCPUProfile(); _ = f.Close() }()
		}
		before := readCPU()
		start := time.Now()
		run, err := s.TC.ExecuteWorkflow(context.Background(), client.StartWorkflowOptions{
			ID: models.BatchWorkflowID(id), TaskQueue: queue,
		}, workflows.BatchSync, models.BatchSyncInput{BatchID: id, Mutations: ms, Retry: models.DefaultRetryPolicy()})
		require.NoError(b.t, err)
		st := waitBatch(b.t, run, 20*time.Minute)
		took := time.Since(start)
		require.Equal(b.t, n, st.Totals().Committed)
		b.t.Logf("throughput run %d %s: %.1f requests/s; CPU per request %s", k, side, n/took.Seconds(),
			readCPU().since(before, n))
		return took
	}
	type side struct {
		ratios []float64
		total  time.Duration
	}
	var chained, single side
	var realTotal time.Duration
	for range rounds {
		c := timeIt("noop-chained", chainedQueue)
		ours := timeIt("real", s.Queue)
		one := timeIt("noop", noopQueue)
		realTotal += ours
		chained.total += c
		chained.ratios = append(chained.ratios, c.Seconds()/ours.Seconds())
		single.total += one
		single.ratios = append(single.ratios, one.Seconds()/ours.Seconds())
	}
	summary := func(sd side) string {
		var each []string
		for _, r := range sd.ratios {
			each = append(each, fmt.Sprintf("%.2f", r))
		}
		sorted := slices.Clone(sd.ratios)
		slices.Sort(sorted)
		return fmt.Sprintf("median %.2f (rounds %s); %.1f requests/s vs %.1f no-op over all runs",
			median(sorted), strings.Join(each, ", "),
			float64(n*rounds)/realTotal.Seconds(), float64(n*rounds)/sd.total.Seconds())
	}
	b.row(fmt.Sprintf("limits raised to 100,000/min, %d requests, beside a no-op activity of the same workflows that delivers what a push is handed (as many activities per request), %d interleaved rounds", n, rounds),
		summary(chained), "≥ 0.9")
	b.row("… beside a no-op of one activity per request (the comparison until 2026-12-02)", summary(single), "(reference)")
}

// median of sorted values.
func median(sorted []float64) float64 {
	m := len(sorted) / 2
	if len(sorted)%2 == 1 {
		return sorted[m]
	}
	return (sorted[m-1] + sorted[m]) / 2
}

// cpuTimes are CPU seconds (user + system) so far of this process, its child
// processes (the dev server), and every redis-server and postgres process, by pid.
type cpuTimes struct {
	self, children float64
	redis, pg      map[int]float64
}

// userHZ is the clock tick of /proc/<pid>/stat's times on Linux.
const userHZ = 100

// readCPU reads cpuTimes from /proc; on a system without it every time is 0.
func readCPU() cpuTimes {
	c := cpuTimes{redis: map[int]float64{}, pg: map[int]float64{}}
	self := os.Getpid()
	dirs, _ := os.ReadDir("/proc")
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		raw, err := os.ReadFile(filepath.Join("/proc", d.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid … utime(14) stime(15): comm may hold spaces.
		open, closing := strings.IndexByte(string(raw), '('), strings.LastIndexByte(string(raw), ')')
		if open < 0 || closing < open {
			continue
		}
		comm := string(raw[open+1 : closing])
		f := strings.Fields(string(raw[closing+1:]))
		if len(f) < 13 {
			continue
		}
		ppid, _ := strconv.Atoi(f[1])
		ut, _ := strconv.ParseFloat(f[11], 64)
		st, _ := strconv.ParseFloat(f[12], 64)
		sec := (ut + st) / userHZ
		switch {
		case pid == self:
			c.self += sec
		case ppid == self:
			c.children += sec
		case comm == "redis-server":
			c.redis[pid] = sec
		case comm == "postgres":
			c.pg[pid] = sec
		}
	}
	return c
}

// since is the CPU from before to c per request of n, in milliseconds; of Redis and
// PostgreSQL, the processes alive at c (a backend the pool opened during the run
// counts whole; one that exited, not at all).
func (c cpuTimes) since(before cpuTimes, n int) string {
	per := func(a, b float64) float64 { return (a - b) * 1000 / float64(n) }
	alive := func(now, then map[int]float64) float64 {
		d := 0.0
		for pid, sec := range now {
			d += sec - then[pid]
		}
		return d
	}
	return fmt.Sprintf("test process %.2f ms, dev server %.2f ms, Redis %.2f ms, PostgreSQL %.2f ms",
		per(c.self, before.self), per(c.children, before.children),
		per(alive(c.redis, before.redis), 0), per(alive(c.pg, before.pg), 0))
}
