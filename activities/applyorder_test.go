package activities

import (
	"context"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/paritysync/paritysync/models"
	"github.com/paritysync/paritysync/otasim/sim"
)

// A channel that applies a push after the client gave up never applies an older
// version after a newer one: a timed-out push keeps its nights leased for the HTTP
// timeout plus the channel's max_apply_delay, its own retry goes at once, and the
// newer version waits until the channel has applied what it received.
func TestTimedOutPushKeepsApplyOrder(t *testing.T) {
	const (
		timeout    = 500 * time.Millisecond
		applyDelay = 1500 * time.Millisecond
	)
	e := newActivityEnv(t, envOptions{
		httpTimeout: timeout,
		lease:       timeout + 200*time.Millisecond,
		channel:     func(c *models.ChannelConfig) { c.MaxApplyDelay = applyDelay },
		sim: func(c *sim.Config) {
			c.Faults = sim.Faults{ApplyDelayMS: int(applyDelay / time.Millisecond), Channels: []string{testChannel}}
		},
	})
	v1 := e.preparedChunk("b-v1", e.mutation("m-v1", 3, 1, withRate("100.00")))
	in1 := models.PushInput{BatchID: "b-v1", ChunkKey: v1.Key, Index: 0, Reservation: "b-v1/0"}
	_, err := e.push(in1)
	failureOf(t, err, models.ErrTransient) // the client gave up; the channel applies v1 later
	// The retry of the same request is not held by its own lease.
	_, err = e.push(in1)
	failureOf(t, err, models.ErrTransient)
	lastLate := time.Now().Add(applyDelay) // the retry's late apply is due by then
	if n := e.simRequests(); n != 2 {
		t.Fatalf("simulator received %d pushes of v1, want 2 (the retry went)", n)
	}

	// From now on the channel applies on arrival: v2 sent before v1 is applied would
	// be overwritten by it.
	if err := e.sim.SetFaults(sim.Faults{}); err != nil {
		t.Fatal(err)
	}
	v2 := e.preparedChunk("b-v2", e.mutation("m-v2", 3, 2, withRate("200.00")))
	in2 := models.PushInput{BatchID: "b-v2", ChunkKey: v2.Key, Index: 0, Reservation: "b-v2/0"}
	blocked := 0
	for deadline := time.Now().Add(10 * time.Second); ; {
		res, err := e.push(in2)
		if err == nil && res.Deferred == nil {
			if res.Committed != 1 {
				t.Fatalf("v2: %+v, want committed", res)
			}
			break
		}
		f := deferralOf(t, res, err)
		blocked++
		if time.Now().After(deadline) {
			t.Fatalf("v2 still held after 10 s: %+v", f)
		}
		time.Sleep(time.Duration(f.Wait))
	}
	if blocked == 0 {
		t.Error("v2 went at once, while the channel could still apply v1")
	}
	time.Sleep(time.Until(lastLate.Add(200 * time.Millisecond)))

	night := e.today.AddDays(3)
	st, err := e.acts.Client.ReadBack(context.Background(), testChannel, testProperty, night, night)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Cells) != 1 || st.Cells[0].Amount == nil || !st.Cells[0].Amount.Equal(decimal.RequireFromString("200.00")) {
		t.Fatalf("channel holds %+v, want v2's 200.00", st.Cells)
	}
	applied := e.sim.Applied(testChannel)
	sawV2 := false
	for _, a := range applied {
		switch {
		case a.Version == 2:
			sawV2 = true
		case sawV2:
			t.Errorf("v%d applied at %s after v2: %+v", a.Version, a.At.Format("15:04:05.000"), applied)
		}
	}
	if !sawV2 {
		t.Errorf("apply log %+v holds no v2", applied)
	}
	if n := e.sim.Stats()[testChannel].OlderApplied; n != 0 {
		t.Errorf("channel applied an older version over a newer one %d times, want 0", n)
	}
}
