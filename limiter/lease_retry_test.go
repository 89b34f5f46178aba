package limiter

import (
	"testing"
	"time"

	"github.com/paritysync/paritysync/models"
)

// A push whose answer never came, then retried and answered: the answer settles
// the retry, not the first attempt, which the channel may still apply. Its nights
// stay leased until the first attempt's lease ends, so a newer version does not go
// out before it; then they are free.
func TestASettledRetryKeepsTheUnansweredAttemptsLease(t *testing.T) {
	rdb, prefix := testRedis(t)
	ch := testChannel("retry", 600, 10, 10000)
	ch.MaxApplyDelay = 300 * time.Millisecond
	const lease = 200 * time.Millisecond
	l := New(rdb, []models.ChannelConfig{ch}, Options{Prefix: prefix, Lease: lease})
	night := models.DateOf(time.Now()).AddDays(3)
	ln := models.ARILine{RoomTypeCode: "DBL", RatePlanCode: "BAR", From: night, To: night.AddDays(1), Version: 1}
	first, newer := req("retry", 3), req("retry", 3)
	first.Lines = []models.ARILine{ln}
	ln.Version = 2
	ln.From = night.AddDays(1) // overlaps the first request on its second night only
	newer.Lines = []models.ARILine{ln}
	if d := mustReserve(t, l, first); d.State != Send {
		t.Fatalf("first: %+v", d)
	}
	sent := time.Now()
	mustSettle(t, l, Settlement{Request: first, Unsettled: true})
	time.Sleep(50 * time.Millisecond)
	if d := mustReserve(t, l, first); d.State != Send {
		t.Fatalf("retry (same id): %+v, want send", d)
	}
	mustSettle(t, l, Settlement{Request: first})
	if d := mustReserve(t, l, newer); d.State != Blocked {
		t.Fatalf("newer version after the retry was answered, while the first attempt may still apply: %+v, want blocked", d)
	}
	time.Sleep(time.Until(sent.Add(lease + ch.MaxApplyDelay + 50*time.Millisecond)))
	if d := mustReserve(t, l, newer); d.State != Send {
		t.Fatalf("newer version after the first attempt's lease: %+v, want send", d)
	}
}
