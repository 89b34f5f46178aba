package limiter

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/paritysync/paritysync/models"
)

// waiter asks for r's slot the way a push does (Dispatch, then wait out whatever it
// is told and ask again) until it may send, and returns its slot's time: when it
// asked, less how late its slot already was. Slots, not the moments the goroutines
// happen to run, are what the channel sees within the margin.
func waiter(t *testing.T, l *Limiter, r Request) time.Time {
	t.Helper()
	for range 50 {
		asked := time.Now()
		d, err := l.Dispatch(context.Background(), r)
		if err != nil {
			t.Errorf("dispatch %s: %v", r.ID, err)
			return time.Time{}
		}
		switch d.State {
		case Send:
			return asked.Add(-d.Late)
		case Wait, Backoff:
			time.Sleep(d.Wait)
		default:
			t.Errorf("dispatch %s: %+v, want send, wait or backoff", r.ID, d)
			return time.Time{}
		}
	}
	t.Errorf("dispatch %s: no send after 50 asks", r.ID)
	return time.Time{}
}

// Waiters released by the end of a back-off leave at the channel's pace, not
// together: with N requests waiting for a back-off (some of them holding slots
// that fell inside it, as a busy channel's lanes do), none is granted a slot
// before its end, the i-th no earlier than i intervals after it, and no more than
// the burst in any interval. The
// back-off comes from a 429 (BackoffScope, on both scopes) or from rate-limit
// headers reporting nothing left (Adapt).
func TestWaitersReleasedByABackoffLeaveAtTheChannelsPace(t *testing.T) {
	const n = 8
	for _, tc := range []struct {
		name  string
		scope models.LimitScope
		// held: the waiters reserved their slots before the back-off was written.
		held    bool
		backoff func(l *Limiter, d time.Duration) error
	}{
		{"429 channel, held slots", models.ScopeChannel, true, func(l *Limiter, d time.Duration) error {
			return l.BackoffScope(context.Background(), "release", "prop_00000001", models.FamilyRates, d)
		}},
		{"429 property, held slots", models.ScopeProperty, true, func(l *Limiter, d time.Duration) error {
			return l.BackoffScope(context.Background(), "release", "prop_00000001", models.FamilyRates, d)
		}},
		{"429 channel, fresh waiters", models.ScopeChannel, false, func(l *Limiter, d time.Duration) error {
			return l.BackoffScope(context.Background(), "release", "prop_00000001", models.FamilyRates, d)
		}},
		{"remaining 0, fresh waiters", models.ScopeChannel, false, func(l *Limiter, d time.Duration) error {
			return l.Adapt(context.Background(), "release", "prop_00000001", models.FamilyRates, 60, 0, d)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rdb, prefix := testRedis(t)
			// Several held slots fall within the margin of the back-off's end.
			ch := shortWindowChannel("release", 3, tc.scope)
			l := New(rdb, []models.ChannelConfig{ch}, Options{Prefix: prefix})
			interval := (ch.Window + l.Margin()) / time.Duration(ch.RatePerMinute)
			const backoff = 700 * time.Millisecond

			rs := make([]Request, n)
			for i := range rs {
				rs[i] = req("release", 3)
			}
			if tc.held {
				// Each holds a slot, one interval apart after the burst; the back-off
				// then covers them all.
				for i := range rs {
					r := rs[i]
					r.Hold = true
					if d := mustReserve(t, l, r); d.State != Wait {
						t.Fatalf("hold %d: %+v", i, d)
					}
				}
			}
			if err := tc.backoff(l, backoff); err != nil {
				t.Fatal(err)
			}
			end := time.Now().Add(backoff)
			slots := make([]time.Time, n)
			var wg sync.WaitGroup
			for i := range rs {
				wg.Add(1)
				go func() {
					defer wg.Done()
					slots[i] = waiter(t, l, rs[i])
				}()
			}
			wg.Wait()
			if t.Failed() {
				return
			}
			slices.SortFunc(slots, func(a, b time.Time) int { return a.Compare(b) })
			var gaps []time.Duration
			for i := 1; i < n; i++ {
				gaps = append(gaps, slots[i].Sub(slots[i-1]).Round(time.Millisecond))
			}
			t.Logf("first slot %s after the back-off's end; gaps %v (interval %s)",
				slots[0].Sub(end).Round(time.Millisecond), gaps, interval)
			if early := end.Sub(slots[0]); early > 20*time.Millisecond {
				t.Fatalf("a waiter was granted a slot %s before the back-off ended: it leaves within the margin, with the others", early)
			}
			offsets := make([]time.Duration, n)
			for i, s := range slots {
				offsets[i] = s.Sub(slots[0])
			}
			if most := models.MostInWindow(offsets, interval-10*time.Millisecond); most > ch.Burst {
				t.Fatalf("%d waiters left within one interval (%s), more than the burst (%d): gaps %v",
					most, interval, ch.Burst, gaps)
			}
			// The pace restarts at the end: the i-th waiter leaves no earlier than i
			// intervals after it (a waiter that came back late leaves late, and the
			// next one may then follow it sooner, within the burst). Half an interval
			// of slack: end is read on this clock after the back-off was written, and
			// a slot's time is when its waiter asked, less its lateness — both move by
			// a busy machine's scheduling; waiters leaving together miss by intervals.
			for i, s := range slots {
				if at := s.Sub(end); at < time.Duration(i)*interval-interval/2 {
					t.Fatalf("waiter %d left %s after the back-off's end, want at least %d intervals (%s): gaps %v",
						i, at, i, time.Duration(i)*interval, gaps)
				}
			}
		})
	}
}

// A per-property back-off is visible to operators and to admission: Status counts
// the scopes backed off and lists those that end last, BackoffsOf tells each given
// scope what is left of the back-off holding it (its own, or the channel's), and
// both forget a back-off once it ended.
func TestScopeBackoffsAreListedAndAsked(t *testing.T) {
	ctx := context.Background()
	rdb, prefix := testRedis(t)
	ch := testChannel("seen429", 60, 6, 1000)
	ch.Scope = models.ScopeProperty
	ch.Protocol = models.ProtocolChannex // rates and restrictions share one endpoint's window
	l := New(rdb, []models.ChannelConfig{ch}, Options{Prefix: prefix})
	if err := l.BackoffScope(ctx, "seen429", "prop_00000001", models.FamilyRates, 300*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if err := l.BackoffScope(ctx, "seen429", "prop_00000002", models.FamilyAvailability, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	st, err := l.Status(ctx, "seen429")
	if err != nil {
		t.Fatal(err)
	}
	if st.BackedOff != 2 || len(st.Backoffs) != 2 || st.PausedFor != 0 {
		t.Fatalf("status %+v, want two scopes backed off and no channel back-off", st)
	}
	if b := st.Backoffs[0]; b.Property != "prop_00000002" || b.Window != models.ChannexEndpoint(models.FamilyAvailability) ||
		b.For < 4*time.Second {
		t.Fatalf("the back-off that ends last: %+v, want prop_00000002's availability for 5 s", b)
	}
	scopes := []Scope{{"prop_00000001", models.FamilyRates}, {"prop_00000001", models.FamilyRestrictions},
		{"prop_00000001", models.FamilyAvailability}, {"prop_00000002", models.FamilyAvailability}}
	left, err := l.BackoffsOf(ctx, "seen429", scopes)
	if err != nil {
		t.Fatal(err)
	}
	// Restrictions share the rates' endpoint, so the 429 on rates holds them too.
	if left[0] <= 0 || left[0] > 300*time.Millisecond || left[1] != left[0] || left[2] != 0 || left[3] < 4*time.Second {
		t.Fatalf("backoffs of %v: %v", scopes, left)
	}
	// A post's worth of scopes, more than one script step takes, each asked once.
	var many []Scope
	for p := range 2500 {
		many = append(many, Scope{fmt.Sprintf("prop_%08d", p), models.FamilyAvailability},
			Scope{fmt.Sprintf("prop_%08d", p), models.FamilyAvailability})
	}
	if left, err := l.BackoffsOf(ctx, "seen429", many); err != nil || len(left) != len(many) ||
		left[4] < 4*time.Second || left[5] != left[4] || left[2] != 0 || left[len(left)-1] != 0 {
		t.Fatalf("backoffs of 5000 scopes: %d answers, %v", len(left), err)
	}
	if _, err := l.BackoffsOf(ctx, "seen429", []Scope{{"", models.FamilyRates}}); !errors.Is(err, ErrInvalidRequest) {
		t.Fatalf("a scope without a property on a per-property channel: %v", err)
	}
	time.Sleep(320 * time.Millisecond)
	if st, err = l.Status(ctx, "seen429"); err != nil || st.BackedOff != 1 || len(st.Backoffs) != 1 {
		t.Fatalf("after the first ended: %+v, %v; want one scope backed off", st, err)
	}
	// A channel-wide back-off holds every scope.
	if err := l.Backoff(ctx, "seen429", 2*time.Second); err != nil {
		t.Fatal(err)
	}
	if left, err = l.BackoffsOf(ctx, "seen429", scopes); err != nil || left[2] < 1900*time.Millisecond || left[3] < 4*time.Second {
		t.Fatalf("with the channel backed off: %v, %v", left, err)
	}
}
