package limiter

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/paritysync/paritysync/models"
)

// The held index is a second copy of what the reservations say; after any mix of
// urgent work, turns, holds, re-asks and blocked answers it must agree with them,
// and once every slot is due it must be empty.
func TestHeldIndexFollowsTheReservations(t *testing.T) {
	rdb, prefix := testRedis(t)
	ch := testChannel("idx", 20, 3, 100000)
	// A 1 s window lets every slot come due within seconds.
	ch.Window = time.Second
	l := New(rdb, []models.ChannelConfig{ch}, Options{Prefix: prefix, Margin: 50 * time.Millisecond})
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(1, 2))
	blocker := req("idx", 3)
	blocker.Property = "prop_00000000"
	blocker.Lines = []models.ARILine{line("DBL", "2030-05-01", "2030-05-03", 1)}
	if d := mustReserve(t, l, blocker); d.State != Send {
		t.Fatalf("blocker: %+v", d)
	}
	var asked []Request
	for range 150 {
		var r Request
		if len(asked) > 0 && rng.IntN(4) == 0 {
			r = asked[rng.IntN(len(asked))]
		} else {
			r = req("idx", 1+rng.IntN(5))
			r.Property = fmt.Sprintf("prop_%08d", rng.IntN(4))
			if rng.IntN(3) == 0 {
				r.Family = models.FamilyAvailability
			}
			r.Hold = rng.IntN(5) == 0
			if r.Property == blocker.Property && r.Family == blocker.Family && rng.IntN(2) == 0 {
				r.Lines = []models.ARILine{line("DBL", "2030-05-02", "2030-05-02", 2)}
			}
			asked = append(asked, r)
		}
		mustReserve(t, l, r)
	}
	base := prefix + "{idx}:"
	now, err := rdb.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	nowMS := float64(now.UnixMicro()) / 1000
	type resv struct {
		St string
		S  float64
		P  int
		G  string
		W  int
	}
	res := map[string]resv{}
	for id, raw := range rdb.HGetAll(ctx, base+"res").Val() {
		// st, s, k, p, w, f, t0, t1, g joined by \x01 (lua/reserve.lua, encode).
		f := strings.SplitN(raw, "\x01", 9)
		if len(f) != 9 {
			t.Fatalf("reservation %s is %q: want 9 fields", id, raw)
		}
		e := resv{St: f[0], G: f[8]}
		var err error
		if e.S, err = strconv.ParseFloat(f[1], 64); err != nil {
			t.Fatalf("reservation %s slot %q: %v", id, f[1], err)
		}
		if e.P, err = strconv.Atoi(f[3]); err != nil {
			t.Fatalf("reservation %s priority %q: %v", id, f[3], err)
		}
		if e.W, err = strconv.Atoi(f[4]); err != nil {
			t.Fatalf("reservation %s weight %q: %v", id, f[4], err)
		}
		res[id] = e
	}
	held := map[string]float64{}
	perGroup := map[string]int{}
	// The index's members: a kind (and priority), \x01, then the rest; turn holds
	// the groups' counts below 1e9, their turn scores from 1e15 and, between, the
	// held slots' times: a kind, \x01 and the id.
	members := map[byte][]string{}
	for _, m := range rdb.ZRange(ctx, base+"index4:all", 0, -1).Val() {
		members[m[0]] = append(members[m[0]], m)
	}
	var turn, counts []redis.Z
	for _, z := range rdb.ZRangeWithScores(ctx, base+"turn4:all", 0, -1).Val() {
		m := z.Member.(string)
		if z.Score < 1e9 {
			counts = append(counts, z)
			continue
		}
		if z.Score >= 1e15 {
			turn = append(turn, z)
			continue
		}
		members[m[0]] = append(members[m[0]], m)
		if m[0] != 'h' {
			continue
		}
		id := m[2:]
		e, ok := res[id]
		if !ok || e.St != "held" || math.Abs(e.S-z.Score) > 1 {
			t.Errorf("held index has %s at %.3f, its reservation %+v", id, z.Score, e)
		}
		held[id] = z.Score
		perGroup[e.G]++
	}
	for id, e := range res {
		if _, ok := held[id]; e.St == "held" && e.S > nowMS+300 && !ok {
			t.Errorf("held reservation %s %+v missing from the index", id, e)
		}
	}
	// A group's counts: 'n\x01group' at 32 times its held slots plus a bit per
	// priority where it has movable work, 'cP\x01group' at its movable slots at P.
	pend := map[string]string{}
	masks := map[string]int{}
	for _, z := range counts {
		m := z.Member.(string)
		switch m[0] {
		case 'n':
			n := int(z.Score)
			pend[m[2:]] = strconv.Itoa(n / 32)
			masks[m[2:]] = n % 32
		case 'c':
			pend[m[1:]] = strconv.FormatFloat(z.Score, 'f', -1, 64)
		default:
			t.Errorf("turn has %q at %f among the counts", m, z.Score)
		}
	}
	movable := map[string]int{}
	for _, m := range members['g'] {
		f := strings.Split(m[1:], "\x01")
		if len(f) != 4 || res[f[3]].St != "held" || strconv.Itoa(res[f[3]].P)+"\x01"+res[f[3]].G != f[0]+"\x01"+f[1] {
			t.Errorf("movable_group member %q does not match its reservation %+v", m, res[f[len(f)-1]])
			continue
		}
		movable[f[0]+"\x01"+f[1]]++
	}
	if n, m, a := len(members['m']), len(members['g']), len(members['a']); n != m || n != a {
		t.Errorf("movable %d members, movable_group %d, first_ask %d", n, m, a)
	}
	for field, v := range pend {
		n, _ := strconv.Atoi(v)
		if p, g, ok := strings.Cut(field, "\x01"); ok {
			if movable[field] != n {
				t.Errorf("pending %s|%s = %d, %d movable", p, g, n, movable[field])
			}
		} else if perGroup[field] != n {
			t.Errorf("pending %s = %d, %d held", field, n, perGroup[field])
		}
	}
	for g, n := range perGroup {
		if pend[g] != strconv.Itoa(n) {
			t.Errorf("group %s holds %d, pending says %q", g, n, pend[g])
		}
	}
	for g, mask := range masks {
		for p := 1; p <= 5; p++ {
			if has := mask&(1<<(p-1)) != 0; has != (movable[strconv.Itoa(p)+"\x01"+g] > 0) {
				t.Errorf("group %s's mask %05b says priority %d has movable work: %v, %d movable",
					g, mask, p, has, movable[strconv.Itoa(p)+"\x01"+g])
			}
		}
	}
	for _, z := range turn {
		m := z.Member.(string)
		p, g, _ := strings.Cut(m, "\x01")
		pi, _ := strconv.Atoi(p)
		w := ch.Shares.Of(models.Family(g[strings.IndexByte(g, '|')+1:]))
		// p * 1e15 + held / weight in millionths, rounded (lua/prelude.lua, turn_score).
		if want := float64(pi)*1e15 + math.Round(float64(perGroup[g])*1e6/float64(w)); movable[m] == 0 || z.Score != want {
			t.Errorf("turn %q = %f, want %f with %d movable", m, z.Score, want, movable[m])
		}
	}
	if len(turn) != len(movable) {
		t.Errorf("turn has %d groups, %d have movable work", len(turn), len(movable))
	}
	if len(held) == 0 || len(movable) == 0 {
		t.Fatalf("the mix left %d held and %d movable groups: nothing checked", len(held), len(movable))
	}

	// Every slot comes due: the next decision sweeps the index empty.
	var last float64
	for _, s := range held {
		last = max(last, s)
	}
	time.Sleep(time.Duration((last-nowMS)*float64(time.Millisecond)) + ch.Window + 200*time.Millisecond)
	mustReserve(t, l, req("idx", 3))
	for _, k := range []string{"index4", "turn4"} {
		if n := rdb.Exists(ctx, base+k+":all").Val(); n != 0 {
			t.Errorf("index key %s left once every slot is due", k)
		}
	}
}
