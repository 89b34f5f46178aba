package limiter

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/paritysync/paritysync/models"
)

// commandStat is one command's line of INFO commandstats.
type commandStat struct{ calls, usec int64 }

// commandStats is the Redis server's INFO commandstats: calls and microseconds per
// command, by name (evalsha, fcall, zadd, …).
func commandStats(tb testing.TB, rdb *redis.Client) map[string]commandStat {
	tb.Helper()
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		tb.Fatalf("INFO commandstats: %v", err)
	}
	stats := map[string]commandStat{}
	for _, ln := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(ln), ":")
		name, cmd := strings.CutPrefix(name, "cmdstat_")
		if !ok || !cmd {
			continue
		}
		var st commandStat
		for _, kv := range strings.Split(rest, ",") {
			k, v, _ := strings.Cut(kv, "=")
			n, _ := strconv.ParseInt(v, 10, 64)
			switch k {
			case "calls":
				st.calls = n
			case "usec":
				st.usec = n
			}
		}
		stats[name] = st
	}
	return stats
}

// scriptStats is the Redis server's count of script and function calls (EVAL,
// EVALSHA and FCALL) and the microseconds it spent in them, from INFO commandstats.
func scriptStats(tb testing.TB, rdb *redis.Client) (calls, usec int64) {
	tb.Helper()
	stats := commandStats(tb, rdb)
	for _, name := range []string{"eval", "evalsha", "fcall"} {
		calls += stats[name].calls
		usec += stats[name].usec
	}
	return calls, usec
}

// scriptTime accumulates the Redis server time of the scripts that run in the
// calls it measures (scriptStats), and reports it per script call.
type scriptTime struct {
	rdb         *redis.Client
	calls, usec int64
}

// measure runs f and counts the script calls and time it took on the server.
func (s *scriptTime) measure(tb testing.TB, f func()) {
	tb.Helper()
	c0, u0 := scriptStats(tb, s.rdb)
	f()
	c1, u1 := scriptStats(tb, s.rdb)
	s.calls += c1 - c0
	s.usec += u1 - u0
}

// report reports the server time per script call as redis-us/decision.
func (s *scriptTime) report(b *testing.B) {
	if s.calls > 0 {
		b.ReportMetric(float64(s.usec)/float64(s.calls), "redis-us/decision")
	}
}

// fillHeld reserves n bulk slots (priority 4 and 5) spread over 100 properties'
// rates and availability, all held in the future: the schedule a deep backlog
// leaves. The reservations go through the library's reserve in pipelines of a thousand.
func fillHeld(tb testing.TB, rdb *redis.Client, l *Limiter, channel string, n int, seq *int) {
	tb.Helper()
	ctx := context.Background()
	if err := loadLibrary(ctx, rdb); err != nil {
		tb.Fatal(err)
	}
	pipe := rdb.Pipeline()
	for i := range n {
		*seq++
		r := Request{Channel: channel, Family: models.FamilyRates, Priority: 4 + i%2, Cost: 1,
			Property: fmt.Sprintf("prop_%08d", i%100), ID: "fill" + strconv.Itoa(*seq)}
		if i%3 == 0 {
			r.Family = models.FamilyAvailability
		}
		keys, args, err := l.reserveCall(r)
		if err != nil {
			tb.Fatal(err)
		}
		pipe.FCall(ctx, reserveFunc, keys, args...)
		if i%1000 == 999 || i == n-1 {
			if _, err := pipe.Exec(ctx); err != nil {
				tb.Fatalf("filling the schedule: %v", err)
			}
		}
	}
}

// BenchmarkReserveHeld measures the Redis server time of one new reservation on a
// schedule that already holds held=N future slots, from INFO commandstats (script
// microseconds over script calls, counting only the decisions measured). Run it
// against an otherwise idle Redis (REDIS_URL): other clients' scripts would count too.
// The decisions mix the three paths a decision takes: urgent work taking the earliest
// bulk slot, a new property taking an over-turn property's slot, and bulk work of a
// property already queued going to the tail. After a tenth of N decisions the
// schedule is rebuilt, so the depth stays within 10 % of N.
func BenchmarkReserveHeld(b *testing.B) {
	rdb, prefix := testRedis(b)
	for _, held := range []int{10, 10000, 100000} {
		ch := testChannel(fmt.Sprintf("held%d", held), 600, 10, 1<<40)
		ch.Shares = models.FamilyShares{Rates: 60, Availability: 40}
		l := New(rdb, []models.ChannelConfig{ch}, Options{Prefix: prefix, MaxAge: time.Hour})
		round := max(1, held/10)
		seq, since := 0, round
		b.Run(fmt.Sprintf("held=%d", held), func(b *testing.B) {
			st := scriptTime{rdb: rdb}
			for i := 0; i < b.N; i++ {
				if since == round {
					b.StopTimer()
					clearKeys(b, rdb, prefix+"{"+ch.Slug+"}")
					// A worker checks its configuration at start: the budget that
					// decisions keep alive exists, as it does in production.
					if err := l.CheckConfig(context.Background()); err != nil {
						b.Fatal(err)
					}
					fillHeld(b, rdb, l, ch.Slug, held, &seq)
					since = 0
					b.StartTimer()
				}
				since++
				seq++
				r := Request{Channel: ch.Slug, Family: models.FamilyRates, Cost: 1, ID: "b" + strconv.Itoa(seq)}
				switch i % 3 {
				case 0:
					r.Priority, r.Property = 1, "prop_00000007"
				case 1:
					r.Priority, r.Property = 5, fmt.Sprintf("new_%08d", seq)
				default:
					r.Priority, r.Property = 5, "prop_00000003"
				}
				st.measure(b, func() {
					if d := mustReserve(b, l, r); d.State != Wait {
						b.Fatalf("decision %d on a deep schedule: %+v, want wait", i, d)
					}
				})
			}
			b.StopTimer()
			st.report(b)
		})
	}
	// One request whose single line covers 365 nights, sent each time (a newer
	// version of the same year), on an empty schedule: the ordering gate's cost.
	ch := testChannel("year", 1_000_000, 500_000, 1<<40)
	l := New(rdb, []models.ChannelConfig{ch}, Options{Prefix: prefix})
	version := int64(0)
	b.Run("line=365", func(b *testing.B) {
		ctx := context.Background()
		st := scriptTime{rdb: rdb}
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			r := req("year", 3)
			version++
			r.Lines = []models.ARILine{line("DBL", "2030-01-01", "2030-12-31", version)}
			st.measure(b, func() {
				if d := mustReserve(b, l, r); d.State != Send || len(d.Dropped) != 0 {
					b.Fatalf("a year's line, version %d: %v, want send", version, d.State)
				}
			})
			if err := l.Release(ctx, r); err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		st.report(b)
	})
}

// BenchmarkReserveLines measures the Redis server time of the ordering gate's
// decision for requests of many lines: 100 room-rates × 365 nights sent each time
// at a newer version, and 100 one-night lines on one room-rate whose year holds a
// version of its own per night (the gate at its most fragmented).
func BenchmarkReserveLines(b *testing.B) {
	rdb, prefix := testRedis(b)
	ch := testChannel("lines", 1_000_000, 500_000, 1<<40)
	ch.MaxLinesPerRequest = 100
	l := New(rdb, []models.ChannelConfig{ch}, Options{Prefix: prefix})
	ctx := context.Background()
	version := int64(1000)
	run := func(b *testing.B, lines func(v int64) []models.ARILine, want func(d Decision) bool) {
		st := scriptTime{rdb: rdb}
		for i := 0; i < b.N; i++ {
			r := req("lines", 3)
			version++
			r.Lines = lines(version)
			st.measure(b, func() {
				if d := mustReserve(b, l, r); !want(d) {
					b.Fatalf("version %d: %v with %d dropped", version, d.State, len(d.Dropped))
				}
			})
			if err := l.Release(ctx, r); err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		st.report(b)
	}
	b.Run("lines=100x365", func(b *testing.B) {
		run(b, func(v int64) []models.ARILine {
			ls := make([]models.ARILine, 100)
			for k := range ls {
				ls[k] = line(fmt.Sprintf("R%03d", k), "2030-01-01", "2030-12-31", v)
			}
			return ls
		}, func(d Decision) bool { return d.State == Send && len(d.Dropped) == 0 })
	})
	b.Run("lines=100x1-fragmented", func(b *testing.B) {
		b.StopTimer()
		year := mustDate("2030-01-01")
		var ns []GateNight
		for d := range 365 {
			ns = append(ns, GateNight{Room: "FRG", Plan: "BAR", Night: year.AddDays(d), Version: int64(1 + 2*d)})
		}
		if _, err := l.LoadGate(ctx, "lines", "prop_00000001", models.FamilyRates, ns); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		// Every other night of a 200-night stretch, at a newer version each time:
		// the nights between keep theirs, so the gate stays a record a night.
		run(b, func(v int64) []models.ARILine {
			ls := make([]models.ARILine, 100)
			for k := range ls {
				d := year.AddDays(100 + 2*k).String()
				ls[k] = line("FRG", d, d, v)
			}
			return ls
		}, func(d Decision) bool { return d.State == Send && len(d.Dropped) == 0 })
	})
}

// TestDecisionInstructions counts the instructions a Redis server spends per decision,
// a steadier figure than time on a shared machine: run redis-server under callgrind
// (valgrind --tool=callgrind redis-server --save "" ...), point REDIS_URL at it (with
// ?read_timeout=300s), and opt in with PARITYSYNC_CALLGRIND=1. It counts what the
// server's main thread does, the network included, between the first and the last
// of 300 decisions, read with callgrind_control: held decisions with 10 and 10,000
// slots held, in BenchmarkReserveHeld's mix (on a channel slow enough that no held
// slot comes due meanwhile), and sends of one line each. It also reports the Redis
// commands a decision makes (INFO commandstats: every command but FCALL itself and
// the connection's own).
func TestDecisionInstructions(t *testing.T) {
	if os.Getenv("PARITYSYNC_CALLGRIND") == "" {
		t.Skip("opt in with PARITYSYNC_CALLGRIND=1, against a redis-server under callgrind")
	}
	const n = 300
	rdb, prefix := testRedis(t)
	ctx := context.Background()
	info, err := rdb.Info(ctx, "server").Result()
	if err != nil {
		t.Fatal(err)
	}
	var pid string
	for _, ln := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(ln), "process_id:"); ok {
			pid = v
		}
	}
	// count runs decide n times (after 30 that warm up) and reports the server's
	// instructions per decision.
	count := func(t *testing.T, decide func(i int)) {
		for i := range 30 {
			decide(-1 - i)
		}
		if out, err := exec.Command("callgrind_control", "-z", pid).CombinedOutput(); err != nil {
			t.Fatalf("callgrind_control -z %s: %v: %s", pid, err, out)
		}
		before := innerCommands(t, rdb)
		for i := range n {
			decide(i)
		}
		commands := innerCommands(t, rdb) - before
		out, err := exec.Command("callgrind_control", "-e", pid).CombinedOutput()
		if err != nil {
			t.Fatalf("callgrind_control -e %s: %v: %s", pid, err, out)
		}
		var total int64
		for _, ln := range strings.Split(string(out), "\n") {
			if f := strings.Fields(strings.ReplaceAll(ln, ",", "")); len(f) == 3 && f[0] == "Th" && f[1] == "1" {
				total, _ = strconv.ParseInt(f[2], 10, 64)
			}
		}
		if total == 0 {
			t.Fatalf("no count from callgrind_control -e %s: %s", pid, out)
		}
		t.Logf("%d instructions a decision, %.1f Redis commands", total/n, float64(commands)/n)
	}
	for _, held := range []int{10, 10000} {
		t.Run(fmt.Sprintf("held=%d", held), func(t *testing.T) {
			ch := testChannel(fmt.Sprintf("cg%d", held), 6, 10, 1<<40)
			ch.Shares = models.FamilyShares{Rates: 60, Availability: 40}
			l := New(rdb, []models.ChannelConfig{ch}, Options{Prefix: prefix, MaxAge: time.Hour})
			if err := l.CheckConfig(ctx); err != nil {
				t.Fatal(err)
			}
			seq := 0
			fillHeld(t, rdb, l, ch.Slug, held, &seq)
			count(t, func(i int) {
				seq++
				r := Request{Channel: ch.Slug, Family: models.FamilyRates, Cost: 1, ID: "b" + strconv.Itoa(seq),
					Priority: 5, Property: "prop_00000003"}
				switch {
				case i >= 0 && i%3 == 0:
					r.Priority, r.Property = 1, "prop_00000007"
				case i >= 0 && i%3 == 1:
					r.Property = fmt.Sprintf("new_%08d", seq)
				}
				if d := mustReserve(t, l, r); d.State != Wait {
					t.Fatalf("decision %d on a deep schedule: %+v, want wait", i, d)
				}
			})
		})
	}
	t.Run("send", func(t *testing.T) {
		l := New(rdb, []models.ChannelConfig{testChannel("cgsend", 1_000_000, 500_000, 1<<40)}, Options{Prefix: prefix})
		count(t, func(i int) {
			// A property of its own each, so that no lease holds another's nights.
			r := req("cgsend", 3)
			r.Property = fmt.Sprintf("p%d", i)
			r.Lines = []models.ARILine{line("DBL", "2030-01-01", "2030-01-03", 1)}
			if d := mustReserve(t, l, r); d.State != Send {
				t.Fatalf("send %d: %+v, want send", i, d)
			}
		})
	})
}

// innerCommands is the server's count of commands run (INFO commandstats) but
// FCALL itself and the connection's own (INFO, HELLO, CLIENT): those a decision's
// function makes.
func innerCommands(tb testing.TB, rdb *redis.Client) int64 {
	tb.Helper()
	var n int64
	for name, st := range commandStats(tb, rdb) {
		if name == "fcall" || name == "info" || name == "hello" || strings.HasPrefix(name, "client") {
			continue
		}
		n += st.calls
	}
	return n
}

// clearKeys deletes every key under prefix.
func clearKeys(tb testing.TB, rdb *redis.Client, prefix string) {
	tb.Helper()
	ctx := context.Background()
	iter := rdb.Scan(ctx, 0, prefix+"*", 1000).Iterator()
	var keys []string
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	if err := iter.Err(); err != nil {
		tb.Fatal(err)
	}
	if len(keys) > 0 {
		if err := rdb.Del(ctx, keys...).Err(); err != nil {
			tb.Fatal(err)
		}
	}
}
