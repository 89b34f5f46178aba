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
// PushRequest does nothing. One run of either side is 2,865 one-line requests on a
// fresh batch id (new versions and prices, so every run sends new content); the runs
// alternate no-op, real, no-op, real, … for PARITYSYNC_BENCH_PAIRS pairs (3), since
// on a shared 2-core machine one side alone varies by a third from run to run. The
// row gives each pair's ratio (no-op time / real time), their median, and the total
// requests/s of each side; the log gives each run's CPU per request in this process
// (worker and simulator), the dev server, Redis and PostgreSQL (the last two
// machine-wide). PARITYSYNC_BENCH_PROFILE names a directory that gets a CPU profile
// of each run.
func (b *bench) throughput() {
	const n = 2865
	pairs := 3
	if v := os.Getenv("PARITYSYNC_BENCH_PAIRS"); v != "" {
		var err error
		pairs, err = strconv.Atoi(v)
		require.NoError(b.t, err, "PARITYSYNC_BENCH_PAIRS")
	}
	profiles := os.Getenv("PARITYSYNC_BENCH_PROFILE")
	chs := map[string]stack.Channel{}
	for _, slug := range []string{"booking_com", "expedia", "agoda"} {
		chs[slug] = stack.Channel{PerMinute: 100000, Burst: 1000, MaxLines: 1}
	}
	s := b.stack(stack.Options{Channels: chs})
	noopQueue := b.noopWorker(s)
	base := time.Now().Unix()

	timeIt := func(side, queue string, k int) time.Duration {
		// 2,865 one-line requests over three channels; run k's versions and prices
		// are its own.
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
	var ratios []float64
	var noopTotal, realTotal time.Duration
	for k := range pairs {
		noop := timeIt("noop", noopQueue, 2*k)
		ours := timeIt("real", s.Queue, 2*k+1)
		noopTotal += noop
		realTotal += ours
		ratios = append(ratios, noop.Seconds()/ours.Seconds())
	}
	var each []string
	for _, r := range ratios {
		each = append(each, fmt.Sprintf("%.2f", r))
	}
	sorted := slices.Clone(ratios)
	slices.Sort(sorted)
	b.row(fmt.Sprintf("limits raised to 100,000/min, %d requests, beside a no-op activity of the same workflows, %d interleaved pairs", n, pairs),
		fmt.Sprintf("median %.2f (pairs %s); %.1f requests/s vs %.1f no-op over all runs",
			median(sorted), strings.Join(each, ", "),
			float64(n*pairs)/realTotal.Seconds(), float64(n*pairs)/noopTotal.Seconds()),
		"≥ 0.9")
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
// processes (the dev server), and every redis-server and postgres process on the
// machine (other tests' share included).
type cpuTimes struct{ self, children, redis, postgres float64 }

// userHZ is the clock tick of /proc/<pid>/stat's times on Linux.
const userHZ = 100

// readCPU reads cpuTimes from /proc; on a system without it every time is 0.
func readCPU() cpuTimes {
	var c cpuTimes
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
			c.redis += sec
		case comm == "postgres":
			c.postgres += sec
		}
	}
	return c
}

// since is the CPU from before to c per request of n, in milliseconds.
func (c cpuTimes) since(before cpuTimes, n int) string {
	per := func(a, b float64) float64 { return (a - b) * 1000 / float64(n) }
	return fmt.Sprintf("test process %.2f ms, dev server %.2f ms, Redis %.2f ms, PostgreSQL %.2f ms",
		per(c.self, before.self), per(c.children, before.children), per(c.redis, before.redis), per(c.postgres, before.postgres))
}
