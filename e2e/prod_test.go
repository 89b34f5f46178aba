//go:build prod

package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/paritysync/paritysync/dial/redistest"
	"github.com/paritysync/paritysync/e2e/stack"
	"github.com/paritysync/paritysync/models"
	"github.com/paritysync/paritysync/otasim/sample"
)

// TestProd runs the production-topology scenarios (prod_topology_test.go), each a
// subtest that prints its figures: workers killed mid-batch, a Redis master failover,
// a Temporal server restart, and the push engine's throughput scenarios beside the
// dev server's. PARITYSYNC_PROD selects scenarios (all, or a comma-separated list of
// kill, failover, restart, throughput); PARITYSYNC_PROD_TRIALS changes the number
// of kill trials (10), PARITYSYNC_PROD_PARALLEL how many kill runs go side by side
// (4; go test's -parallel must allow as many); PARITYSYNC_PROD_OUT names a file that
// gets the figures too. `make test-prod` runs it.
func TestProd(t *testing.T) {
	sel := os.Getenv("PARITYSYNC_PROD")
	if sel == "" {
		sel = "all"
	}
	began := time.Now()
	p := startProdTopology(t)
	r := &prodReport{}
	r.add("wall time", "topology up (Temporal schema and server, Redis Cluster, worker binary)",
		time.Since(began).Round(time.Second).String())
	for _, sc := range []struct {
		name string
		run  func(*testing.T, *prodTopology, *prodReport)
	}{
		{"kill", prodWorkerKills},
		{"failover", prodRedisFailover},
		{"restart", prodTemporalRestart},
		{"throughput", prodThroughput},
	} {
		if !selected(sel, sc.name) {
			continue
		}
		start := time.Now()
		t.Run(sc.name, func(t *testing.T) { sc.run(t, p, r) })
		r.add("wall time", sc.name, time.Since(start).Round(time.Second).String())
	}
	r.add("wall time", "TestProd in all (topology included)", time.Since(began).Round(time.Second).String())
	report(t, "PARITYSYNC_PROD_OUT", [3]string{"scenario", "what", "measured"}, r.rows)
}

// prodReport gathers every scenario's figures for one printout.
type prodReport struct{ rows [][3]string }

func (r *prodReport) add(scenario, what, figure string) {
	r.rows = append(r.rows, [3]string{scenario, what, figure})
}

// The batch the fault scenarios run: 500 sample mutations over three channels at 6
// requests per 6 s window (burst 2), one line per request: 123 requests, about 41
// per channel, so every channel's window is in use for the seven or eight windows
// the batch takes. The assertions are relative to the window (most in any window,
// 429s, outcomes, time against the undisturbed run), so a short one; the batch
// still lasts longer than a lost push's activity timeout (30 s).
const (
	prodWindow    = 6 * time.Second
	prodLimit     = 6
	prodBurst     = 2
	prodMutations = 500
)

var prodChannels = []string{"booking_com", "expedia", "agoda"}

func prodBatchOptions() stack.Options {
	chs := map[string]stack.Channel{}
	for _, c := range prodChannels {
		chs[c] = stack.Channel{PerMinute: prodLimit, Burst: prodBurst, MaxLines: 1}
	}
	return stack.Options{Workers: 3, Channels: chs, Window: prodWindow}
}

// prodMost is the most arrivals in any window of the fault scenarios' channels.
func prodMost(ts []time.Time) int { return models.MostInWindowAt(ts, prodWindow) }

// prodNominal is how long the fault scenarios' batch takes undisturbed, about (44 s
// measured): the kill trials, which run beside the undisturbed run, draw their
// moment from it.
const prodNominal = 45 * time.Second

// prodHold is how long the channel holds its answer after applying a push, so a
// push is in flight (applied, unanswered) long enough to be killed with it.
const prodHold = 200 * time.Millisecond

// batchRun is one fault scenario's batch and what it ended with.
type batchRun struct {
	id       string
	ms       []models.Mutation
	started  time.Time
	took     time.Duration
	status   models.BatchStatus
	stored   models.ChannelCounts
	want     int
	channels map[string]channelFigures
	// conflicts counts nights the channel applied twice at one version with
	// different values.
	conflicts int
}

type channelFigures struct {
	most, throttled, stale, duplicates, requests int
}

// startProdBatch saves a prodMutations-mutation batch in the store (it travels by
// reference) and starts it.
func startProdBatch(t *testing.T, s *prodStack, seed uint64) *batchRun {
	t.Helper()
	st := s.store
	b := &batchRun{id: "prod-" + uuid.NewString()[:8],
		ms: sample.Batch(prodMutations, models.DateOf(time.Now()), time.Now().UnixNano(), seed)}
	b.want = expectedUpdates(t, b.ms)
	key, err := st.SaveBatch(context.Background(), b.id, b.ms)
	require.NoError(t, err)
	b.started = time.Now()
	s.startBatch(t, models.BatchSyncInput{BatchID: b.id, PayloadKey: key, Retry: models.DefaultRetryPolicy()})
	return b
}

// finish waits for the batch and checks what every fault scenario promises: every
// update has exactly one outcome, in the workflow's status and in the store; no
// dead letters; no older version after a newer one; no night applied twice at one
// version with different values. The limits are the scenario's to check.
func (b *batchRun) finish(t *testing.T, s *prodStack) {
	t.Helper()
	run := s.TC.GetWorkflow(context.Background(), models.BatchWorkflowID(b.id), "")
	b.status = waitBatch(t, run, 15*time.Minute)
	b.took = time.Since(b.started)
	b.stored = storedTotal(t, s.store, b.id)
	b.conflicts = s.ledger.count()
	b.channels = map[string]channelFigures{}
	for slug, cs := range s.Sim.Stats() {
		b.channels[slug] = channelFigures{most: prodMost(arrivals(s.e2eStack, slug, nil)), throttled: cs.Throttled,
			stale: cs.StaleReceived, duplicates: cs.Duplicates, requests: cs.Requests}
	}
	total := b.status.Totals()
	require.True(t, b.status.Done)
	require.Equal(t, b.want, total.Total)
	require.Equal(t, b.want, total.Done(), "every update has an outcome")
	require.Equal(t, b.want, b.stored.Total, "one stored outcome per update: none twice, none missing")
	require.Equal(t, total.Committed, b.stored.Committed)
	require.Equal(t, total.Superseded, b.stored.Superseded)
	require.Equal(t, total.Rejected, b.stored.Rejected)
	require.Equal(t, total.DeadLettered, b.stored.DeadLettered)
	require.Zero(t, total.DeadLettered, "dead letters")
	require.Zero(t, b.conflicts, "applied twice with a different result: %v", s.ledger.conflicts)
	for slug, c := range b.channels {
		require.Zero(t, c.stale, "%s: stale_received", slug)
	}
}

// outcomes is the one-line summary of a finished batch.
func (b *batchRun) outcomes() string {
	tot := b.status.Totals()
	return fmt.Sprintf("%d updates: %d committed, %d superseded, %d rejected, %d dead-lettered; %d stored outcomes; "+
		"%d without an outcome; %d applied twice with a different result",
		b.want, tot.Committed, tot.Superseded, tot.Rejected, tot.DeadLettered, b.stored.Total,
		b.want-tot.Done(), b.conflicts)
}

// most is the most requests any channel received in one window, and stale_received summed.
func (b *batchRun) most() (most, stale, throttled, dups int) {
	for _, c := range b.channels {
		most, stale = max(most, c.most), stale+c.stale
		throttled, dups = throttled+c.throttled, dups+c.duplicates
	}
	return
}

// prodWorkerKills: ten trials of the fault batch, each with one worker of three
// killed with SIGKILL at a random moment while it has requests in flight and a
// replacement started at once, beside an undisturbed run. The runs go side by
// side, PARITYSYNC_PROD_PARALLEL (4) at a time, each on a stack of its own (task
// queue, key prefix, simulator, schema) on the one topology.
func prodWorkerKills(t *testing.T, p *prodTopology, r *prodReport) {
	trials := 10
	if n, err := strconv.Atoi(os.Getenv("PARITYSYNC_PROD_TRIALS")); err == nil && n > 0 {
		trials = n
	}
	parallel := 4
	if n, err := strconv.Atoi(os.Getenv("PARITYSYNC_PROD_PARALLEL")); err == nil && n > 0 {
		parallel = n
	}
	// One result per run, the undisturbed one first; each run is a subtest, so its
	// stack (worker processes, connections) is gone when it ends.
	type killRun struct {
		b        *batchRun
		victim   int
		inflight int64
		killedAt time.Duration
		most     int
		stale    int
		throttle int
		dups     int
	}
	runs := make([]*killRun, trials+1)
	slots := make(chan struct{}, parallel)
	t.Run("runs", func(t *testing.T) {
		t.Run("undisturbed", func(t *testing.T) {
			t.Parallel()
			slots <- struct{}{}
			defer func() { <-slots }()
			s := p.newProdStack(t, prodBatchOptions(), prodHold)
			b := startProdBatch(t, s, 100)
			b.finish(t, s)
			most, stale, throttled, dups := b.most()
			require.LessOrEqual(t, most, prodLimit)
			require.Zero(t, throttled, "429s")
			t.Logf("undisturbed: %s in %s; most in one window %d, stale_received %d", b.outcomes(), b.took.Round(100*time.Millisecond), most, stale)
			runs[0] = &killRun{b: b, most: most, stale: stale, throttle: throttled, dups: dups}
		})
		for trial := 1; trial <= trials; trial++ {
			t.Run(fmt.Sprintf("trial %02d", trial), func(t *testing.T) {
				t.Parallel()
				slots <- struct{}{}
				defer func() { <-slots }()
				s := p.newProdStack(t, prodBatchOptions(), prodHold)
				b := startProdBatch(t, s, uint64(100+trial))
				at := time.Duration((0.1 + 0.6*rand.Float64()) * float64(prodNominal))
				time.Sleep(at)
				// The kill waits for a worker with requests in flight (at most 20 s).
				var victim *workerProc
				var inflight int64
				deadline := time.Now().Add(20 * time.Second)
				for victim == nil && time.Now().Before(deadline) {
					var busy []*workerProc
					for _, w := range s.live() {
						if w.inflight.Load() > 0 {
							busy = append(busy, w)
						}
					}
					if len(busy) > 0 {
						victim = busy[rand.IntN(len(busy))]
						inflight = victim.inflight.Load()
						s.kill9(victim)
						break
					}
					time.Sleep(2 * time.Millisecond)
				}
				require.NotNil(t, victim, "trial %d: no worker had a request in flight", trial)
				killedAt := time.Since(b.started)
				s.startWorker()
				b.finish(t, s)
				most, st, throttled, dups := b.most()
				require.LessOrEqual(t, most, prodLimit, "trial %d: most requests in one window", trial)
				require.Zero(t, throttled, "trial %d: 429s", trial)
				t.Logf("trial %d: killed worker %d at %s with %d in flight; %s in %s", trial, victim.n,
					killedAt.Round(100*time.Millisecond), inflight, b.outcomes(), b.took.Round(100*time.Millisecond))
				runs[trial] = &killRun{b: b, victim: victim.n, inflight: inflight, killedAt: killedAt,
					most: most, stale: st, throttle: throttled, dups: dups}
			})
		}
	})
	for i, run := range runs {
		require.NotNil(t, run, "run %d finished", i)
	}
	baseline := runs[0].b
	r.add("1. kill -9 a worker", fmt.Sprintf("undisturbed run, 3 workers (baseline, beside the trials, %d runs at a time)", parallel),
		fmt.Sprintf("%.1f s; %s", baseline.took.Seconds(), baseline.outcomes()))
	var slowdowns []float64
	worstMost, stale, lost, conflicts, inflightSum, throttled := runs[0].most, 0, 0, 0, 0, 0
	for trial, run := range runs[1:] {
		b := run.b
		worstMost, stale = max(worstMost, run.most), stale+run.stale
		lost += b.want - b.status.Totals().Done()
		conflicts += b.conflicts
		inflightSum += int(run.inflight)
		throttled += run.throttle
		ratio := b.took.Seconds() / baseline.took.Seconds()
		slowdowns = append(slowdowns, ratio)
		r.add("1. kill -9 a worker", fmt.Sprintf("trial %d: worker %d killed at %.1f s with %d request(s) in flight",
			trial+1, run.victim, run.killedAt.Seconds(), run.inflight),
			fmt.Sprintf("finished in %.1f s = %.2f × undisturbed; %d without an outcome, %d applied twice differently, "+
				"stale_received %d, most in one %s window %d (limit %d), %d 429s, %d idempotent replays",
				b.took.Seconds(), ratio, b.want-b.status.Totals().Done(), b.conflicts,
				run.stale, prodWindow, run.most, prodLimit, run.throttle, run.dups))
	}
	slices.Sort(slowdowns)
	r.add("1. kill -9 a worker", fmt.Sprintf("%d trials, %d requests in flight at the kills", trials, inflightSum),
		fmt.Sprintf("%d updates without an outcome, %d applied twice with a different result, stale_received %d, "+
			"most in any %s window %d (limit %d), %d 429s; time to finish × undisturbed: median %.2f, max %.2f",
			lost, conflicts, stale, prodWindow, worstMost, prodLimit, throttled, slowdowns[len(slowdowns)/2], slowdowns[len(slowdowns)-1]))
}

// replicationInfo reads one field of INFO replication on the node at port.
func replicationInfo(t *testing.T, p *prodTopology, port int, field string) string {
	t.Helper()
	out, err := p.redis.CLI(port, "info", "replication")
	if err != nil {
		return "" // the node is down or not up yet
	}
	m := regexp.MustCompile(`(?m)^` + field + `:(\S+)`).FindStringSubmatch(out)
	if m == nil {
		return ""
	}
	return m[1]
}

// channelNodes finds the master holding a channel's hash slot and its replica.
func channelNodes(t *testing.T, p *prodTopology, prefix, channel string) (master, replica int) {
	t.Helper()
	slotOut, err := p.redis.CLI(p.redis.Ports[0], "cluster", "keyslot", prefix+"{"+channel+"}:daily")
	require.NoError(t, err)
	slot, err := strconv.Atoi(strings.TrimSpace(slotOut))
	require.NoError(t, err)
	nodes, err := p.redis.CLI(p.redis.Ports[0], "cluster", "nodes")
	require.NoError(t, err)
	portOf := map[string]int{}
	masterID := ""
	for _, line := range strings.Split(strings.TrimSpace(nodes), "\n") {
		f := strings.Fields(line)
		addr := f[1][:strings.Index(f[1], "@")]
		port, _ := strconv.Atoi(addr[strings.LastIndex(addr, ":")+1:])
		portOf[f[0]] = port
		if !strings.Contains(f[2], "master") || strings.Contains(f[2], "fail") {
			continue
		}
		for _, rng := range f[8:] {
			lo, hi, ok := strings.Cut(rng, "-")
			if !ok {
				hi = lo
			}
			a, _ := strconv.Atoi(lo)
			b, _ := strconv.Atoi(hi)
			if slot >= a && slot <= b {
				masterID, master = f[0], port
			}
		}
	}
	require.NotEmpty(t, masterID, "the master of slot %d", slot)
	for _, line := range strings.Split(strings.TrimSpace(nodes), "\n") {
		f := strings.Fields(line)
		if strings.Contains(f[2], "slave") && f[3] == masterID && !strings.Contains(f[2], "fail") {
			replica = portOf[f[0]]
		}
	}
	require.NotZero(t, replica, "a replica of %d", master)
	return master, replica
}

// channelSnapshot is every key of one channel on one node with its serialized value.
func channelSnapshot(t *testing.T, port int, prefix, channel string) map[string]string {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + strconv.Itoa(port)})
	defer rdb.Close()
	ctx := context.Background()
	out := map[string]string{}
	iter := rdb.Scan(ctx, 0, prefix+"{"+channel+"}*", 1000).Iterator()
	for iter.Next(ctx) {
		v, err := rdb.Dump(ctx, iter.Val()).Result()
		if err == nil {
			out[iter.Val()] = v
		}
	}
	require.NoError(t, iter.Err())
	return out
}

// prodRedisFailover: the master holding expedia's hash slot is killed with SIGKILL
// mid-batch; its replica is promoted and the batch finishes. The channel's most
// requests in any window may exceed the limit by at most one burst; what the
// promoted replica did not have is measured and printed.
func prodRedisFailover(t *testing.T, p *prodTopology, r *prodReport) {
	const channel = "expedia"
	s := p.newProdStack(t, prodBatchOptions(), prodHold)
	master, replica := channelNodes(t, p, s.Prefix, channel)
	b := startProdBatch(t, s, 200)
	// A third of the channel's requests are done.
	require.Eventually(t, func() bool { return s.Sim.Stats()[channel].Accepted >= 14 }, 3*time.Minute, 20*time.Millisecond)

	// The state the old master holds a moment before it dies, and how far its
	// replica has got.
	before := channelSnapshot(t, master, s.Prefix, channel)
	masterOffset, _ := strconv.ParseInt(replicationInfo(t, p, master, "master_repl_offset"), 10, 64)
	replicaOffset, _ := strconv.ParseInt(replicationInfo(t, p, replica, "slave_repl_offset"), 10, 64)
	p.redis.Kill(master)
	killedAt := time.Since(b.started)
	killed := time.Now()
	var promoted time.Duration
	redistest.WaitFor(t, time.Minute, "replica promoted", func() bool {
		if replicationInfo(t, p, replica, "role") == "master" {
			promoted = time.Since(killed)
			return true
		}
		return false
	})
	after := channelSnapshot(t, replica, s.Prefix, channel)
	// second_repl_offset is where the promoted replica's history diverges: the old
	// master's stream up to it, exclusive, is what the new master has.
	second, _ := strconv.ParseInt(replicationInfo(t, p, replica, "second_repl_offset"), 10, 64)
	missing, differ := 0, 0
	var missingKeys, differKeys []string
	for k, v := range before {
		w, ok := after[k]
		switch {
		case !ok:
			missing++
			missingKeys = append(missingKeys, strings.TrimPrefix(k, s.Prefix))
		case w != v:
			differ++
			differKeys = append(differKeys, strings.TrimPrefix(k, s.Prefix))
		}
	}
	slices.Sort(missingKeys)
	slices.Sort(differKeys)
	t.Logf("failover: master %d killed at %s (offset %d, replica at %d); replica %d promoted after %s at offset %d; "+
		"%d of %d keys missing %v, %d differ %v", master, killedAt.Round(100*time.Millisecond), masterOffset, replicaOffset,
		replica, promoted.Round(100*time.Millisecond), second-1, missing, len(before), missingKeys, differ, differKeys)

	b.finish(t, s)
	// The old master comes back as a replica of the new one, so the next scenario
	// has a replica behind every master again.
	p.redis.StartNode(master)
	redistest.WaitFor(t, time.Minute, "old master back as a replica", func() bool {
		return replicationInfo(t, p, master, "role") == "slave" && replicationInfo(t, p, master, "master_link_status") == "up"
	})

	fig := b.channels[channel]
	over := max(0, fig.most-prodLimit)
	require.LessOrEqual(t, fig.most, prodLimit+prodBurst, "%s: over-grant after the failover at most one burst", channel)
	for slug, c := range b.channels {
		if slug != channel {
			require.LessOrEqual(t, c.most, prodLimit, slug)
		}
	}
	r.add("2. Redis master failover", fmt.Sprintf("master of {%s} killed at %.1f s (3 workers, %d per %s window, burst %d)",
		channel, killedAt.Seconds(), prodLimit, prodWindow, prodBurst),
		fmt.Sprintf("replica promoted after %.1f s; batch finished in %.1f s; %s", promoted.Seconds(), b.took.Seconds(), b.outcomes()))
	r.add("2. Redis master failover", "over-grant on "+channel,
		fmt.Sprintf("most in any %s window %d = limit %d + %d (bound: one burst, %d); %d 429s; stale_received %d",
			prodWindow, fig.most, prodLimit, over, prodBurst, fig.throttled, fig.stale))
	r.add("2. Redis master failover", "lost with the old master",
		fmt.Sprintf("replication stream: master at offset %d a moment before the kill, replica at %d then, promoted at %d "+
			"(%d bytes not replicated at most); channel keys: %d on the old master, %d missing on the new one %v, "+
			"%d with another value %v (written between the snapshot and the kill, or lost)",
			masterOffset, replicaOffset, second-1, max(0, masterOffset-(second-1)), len(before), missing, missingKeys,
			differ, differKeys))
}

// prodTemporalRestart: the Temporal server process is stopped (SIGTERM) mid-batch
// and started again on the same PostgreSQL databases; the batch resumes and
// finishes with nothing lost.
func prodTemporalRestart(t *testing.T, p *prodTopology, r *prodReport) {
	s := p.newProdStack(t, prodBatchOptions(), prodHold)
	b := startProdBatch(t, s, 300)
	// A quarter of the pushes are done.
	require.Eventually(t, func() bool { return s.accepted() >= 30 }, 3*time.Minute, 20*time.Millisecond)
	acceptedAtStop := s.accepted()
	stoppedAt := time.Since(b.started)
	stopTook := p.stopServer()
	down := time.Now()
	p.startServer()
	downtime := time.Since(down) + stopTook
	t.Logf("server stopped at %s after %d accepted pushes (exit took %s), serving again after %s",
		stoppedAt.Round(100*time.Millisecond), acceptedAtStop, stopTook.Round(100*time.Millisecond), downtime.Round(100*time.Millisecond))
	b.finish(t, s)
	most, stale, throttled, _ := b.most()
	require.LessOrEqual(t, most, prodLimit)
	r.add("3. Temporal server restart", fmt.Sprintf("SIGTERM at %.1f s (%d of %d pushes done), started again on the same databases",
		stoppedAt.Seconds(), acceptedAtStop, s.accepted()),
		fmt.Sprintf("frontend unavailable %.1f s (exit %.1f s); batch finished in %.1f s; %s; stale_received %d, most in any %s window %d (limit %d), %d 429s",
			downtime.Seconds(), stopTook.Seconds(), b.took.Seconds(), b.outcomes(), stale, prodWindow, most, prodLimit, throttled))
}

// prodThroughput runs the push engine benchmark's saturated-channel and
// urgent-latency scenarios on the production topology and on a dev server with the
// single Redis, and prints them side by side. They keep the real 60 s window (they
// are benchmarks). Each run has a stack of its own and the limiter, not the
// machine, sets their pace, so the four saturated runs go side by side, then the
// two urgent ones.
func prodThroughput(t *testing.T, p *prodTopology, r *prodReport) {
	dev := startDevServer(t)
	columns := []struct {
		name  string
		bench func(t *testing.T) *bench
	}{
		{"production", func(t *testing.T) *bench {
			return &bench{t: t, newStack: func(t *testing.T, o stack.Options) *e2eStack {
				return p.newProdStack(t, o, 0).e2eStack
			}}
		}},
		{"dev server", func(t *testing.T) *bench { return &bench{t: t, srv: dev} }},
	}
	// rows[column] are the saturated runs with 1 and 3 workers, then the urgent one.
	rows := make([][][3]string, len(columns))
	for i := range rows {
		rows[i] = make([][3]string, 3)
	}
	t.Run("saturated", func(t *testing.T) {
		for c, col := range columns {
			for k, workers := range []int{1, 3} {
				t.Run(fmt.Sprintf("%s, %d worker(s)", col.name, workers), func(t *testing.T) {
					t.Parallel()
					b := col.bench(t)
					b.saturatedWith(workers)
					require.Len(t, b.rows, 1)
					rows[c][k] = b.rows[0]
				})
			}
		}
	})
	t.Run("urgent", func(t *testing.T) {
		for c, col := range columns {
			t.Run(col.name, func(t *testing.T) {
				t.Parallel()
				b := col.bench(t)
				b.urgent()
				require.Len(t, b.rows, 1)
				rows[c][2] = b.rows[0]
			})
		}
	})
	for i, row := range rows[0] {
		require.NotEmpty(t, row[0], "production row %d", i)
		require.NotEmpty(t, rows[1][i][0], "dev server row %d", i)
		r.add("4. throughput", row[0], fmt.Sprintf("production: %s · dev server: %s (target %s)", row[1], rows[1][i][1], row[2]))
	}
}
