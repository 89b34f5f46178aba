package store

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/paritysync/paritysync/models"
)

// TestParityLagOldestOwedAndAckQuantiles: the age of the oldest open batch with
// updates still owed on a channel rises with the clock and ends with the last
// outcome; the quantiles of acceptance → acknowledgement are those of the acks in
// the window (a retried ack counts once), per channel and per property.
func TestParityLagOldestOwedAndAckQuantiles(t *testing.T) {
	ctx := context.Background()
	var mu sync.Mutex
	clock := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	now := func() time.Time { mu.Lock(); defer mu.Unlock(); return clock }
	advance := func(d time.Duration) { mu.Lock(); clock = clock.Add(d); mu.Unlock() }
	s := testStore(t, WithClock(now))

	lag := func(property string) map[string]ParityLag {
		t.Helper()
		ls, err := s.ParityLag(ctx, time.Hour, property)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]ParityLag{}
		for _, l := range ls {
			out[l.Channel] = l
		}
		return out
	}
	if got := lag(""); len(got) != 0 {
		t.Fatalf("nothing owed or acknowledged yet: %+v", got)
	}

	// Batch b1 accepted at 10:00 with 3 updates for booking.
	if _, err := s.SaveBatch(ctx, "b1", nil); err != nil {
		t.Fatal(err)
	}
	if err := s.RecordExpected(ctx, "b1", map[string]int{"booking": 3}); err != nil {
		t.Fatal(err)
	}
	advance(40 * time.Second)
	l := lag("")["booking"]
	if l.Oldest != 40*time.Second || l.Pending != 3 || l.Acked != 0 {
		t.Fatalf("after 40 s: %+v; want oldest 40s, 3 pending, none acked", l)
	}
	advance(20 * time.Second)
	if l := lag("")["booking"]; l.Oldest != time.Minute {
		t.Fatalf("the age rises while nothing is acknowledged: %+v", l)
	}

	// Two updates acknowledged 60 s after acceptance, the ack retried.
	req := requestOf(t, price("m1", 1, "90", 0), price("m2", 1, "90", 1))
	for range 2 {
		if _, _, err := s.RecordAcknowledged(ctx, Ack{BatchID: "b1", Request: req, ConfirmationID: "c1"}); err != nil {
			t.Fatal(err)
		}
	}
	l = lag("")["booking"]
	if l.Pending != 1 || l.Acked != 2 || l.P50 < time.Minute || l.P50 > 72*time.Second || l.P99 != l.P50 {
		t.Fatalf("after the ack: %+v; want 1 pending, 2 acked, p50 = p99 in [60 s, 60 s + 19 %%]", l)
	}
	// The third, 10 minutes after acceptance: p99 is its bucket, p50 still a minute.
	advance(9 * time.Minute)
	if _, _, err := s.RecordAcknowledged(ctx, Ack{BatchID: "b1", Request: requestOf(t, price("m3", 1, "90", 2)),
		ConfirmationID: "c2"}); err != nil {
		t.Fatal(err)
	}
	l = lag("")["booking"]
	if l.Pending != 0 || l.Oldest != 0 || l.Acked != 3 || l.P99 < 10*time.Minute || l.P99 > 12*time.Minute ||
		l.P50 > 72*time.Second {
		t.Fatalf("every update has its outcome: %+v; want nothing owed, 3 acked, p50 ≈ 1 min, p99 ≈ 10 min", l)
	}
	if p := lag("prop_0000abcd")["booking"]; p.Acked != 3 || p.P99 != l.P99 || p.Property != "prop_0000abcd" {
		t.Fatalf("per property: %+v", p)
	}
	if p := lag("prop_other"); len(p) != 0 {
		t.Fatalf("a property never pushed has no lag: %+v", p)
	}
	// A released batch owes nothing even without every count (Prune-age batches).
	if err := s.ReleaseBatch(ctx, "b1"); err != nil {
		t.Fatal(err)
	}
	// Out of the window the acks no longer count; past two hours their rows go.
	advance(61 * time.Minute)
	if l := lag("")["booking"]; l.Acked != 0 || l.P50 != 0 {
		t.Fatalf("an hour later: %+v", l)
	}
	advance(time.Hour)
	lag("")
	if rows := rowCount(t, s, "ack_lag"); rows != 0 {
		t.Fatalf("%d ack_lag rows left after two hours", rows)
	}
}

// TestParityLagOfAReleasedInlineBatchIsNothing: a batch without a payload (inline)
// that never recorded every outcome stops counting once released.
func TestParityLagOfAReleasedInlineBatchIsNothing(t *testing.T) {
	ctx := context.Background()
	s := testStore(t)
	if err := s.RecordExpected(ctx, "inline", map[string]int{"expedia": 2}); err != nil {
		t.Fatal(err)
	}
	ls, err := s.ParityLag(ctx, time.Hour, "")
	if err != nil || len(ls) != 1 || ls[0].Pending != 2 {
		t.Fatalf("open inline batch: %+v, %v", ls, err)
	}
	if err := s.ReleaseBatch(ctx, "inline"); err != nil {
		t.Fatal(err)
	}
	if ls, err = s.ParityLag(ctx, time.Hour, ""); err != nil || len(ls) != 0 {
		t.Fatalf("released: %+v, %v", ls, err)
	}
}

func TestLagBucketBoundsTheLatency(t *testing.T) {
	for _, d := range []time.Duration{0, time.Millisecond, 3 * time.Millisecond, 850 * time.Millisecond,
		time.Second, 61 * time.Second, 3 * time.Hour} {
		up := lagOfBucket(lagBucket(d))
		if up < d.Round(time.Millisecond) || (d > 2*time.Millisecond && float64(up) > 1.19*float64(d)) {
			t.Errorf("%s: bucket %d bound %s", d, lagBucket(d), up)
		}
	}
}

// TestParityLagPerPropertyDatesTheOldestOwedCell: a property's lag on a channel is
// the age of the oldest desired change of its cells the channel has not
// acknowledged, with how many cells are owed; a newer version before the channel
// caught up keeps the first date, an acknowledgement at the desired version clears
// the cell, and a change after parity is dated anew. Another property owes nothing.
func TestParityLagPerPropertyDatesTheOldestOwedCell(t *testing.T) {
	ctx := context.Background()
	var mu sync.Mutex
	clock := time.Now().UTC().Truncate(time.Second) // as PostgreSQL keeps it (µs)
	now := func() time.Time { mu.Lock(); defer mu.Unlock(); return clock }
	advance := func(d time.Duration) { mu.Lock(); clock = clock.Add(d); mu.Unlock() }
	s := testStore(t, WithClock(now))
	owed := func() ParityLag {
		t.Helper()
		ls, err := s.ParityLag(ctx, time.Hour, "prop_0000abcd")
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range ls {
			if l.Channel == "booking" {
				return l
			}
		}
		return ParityLag{}
	}
	desire := func(ms ...models.Mutation) {
		t.Helper()
		if _, err := s.RecordDesired(ctx, ms); err != nil {
			t.Fatal(err)
		}
	}
	ack := func(ms ...models.Mutation) {
		t.Helper()
		if _, _, err := s.RecordAcknowledged(ctx, Ack{BatchID: "b1", Request: requestOf(t, ms...), ConfirmationID: "c"}); err != nil {
			t.Fatal(err)
		}
	}

	desire(price("m1", 1, "90", 0), price("m2", 1, "90", 1))
	advance(30 * time.Second)
	if l := owed(); l.OwedCells != 2 || l.Oldest != 30*time.Second {
		t.Fatalf("two cells owed for 30 s: %+v", l)
	}
	advance(30 * time.Second)
	desire(price("m1", 2, "95", 0))
	if l := owed(); l.OwedCells != 2 || l.Oldest != time.Minute {
		t.Fatalf("a newer version before the ack keeps the first date: %+v", l)
	}
	ack(price("m2", 1, "90", 1))
	if l := owed(); l.OwedCells != 1 || l.Oldest != time.Minute {
		t.Fatalf("m2's cell acknowledged, m1's still owed since the start: %+v", l)
	}
	ack(price("m1", 1, "90", 0))
	if l := owed(); l.OwedCells != 1 {
		t.Fatalf("an ack of an older version leaves the cell owed: %+v", l)
	}
	ack(price("m1", 2, "95", 0))
	if l := owed(); l.OwedCells != 0 || l.Oldest != 0 {
		t.Fatalf("in parity: %+v", l)
	}
	desire(price("m1", 3, "99", 0))
	advance(10 * time.Second)
	if l := owed(); l.OwedCells != 1 || l.Oldest != 10*time.Second {
		t.Fatalf("a change after parity is dated anew: %+v", l)
	}
	ls, err := s.ParityLag(ctx, time.Hour, "prop_other")
	if err != nil || len(ls) != 0 {
		t.Fatalf("another property: %+v, %v", ls, err)
	}
}
