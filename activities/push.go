package activities

import (
	"context"
	"time"

	"go.temporal.io/sdk/activity"

	"github.com/paritysync/paritysync/config"
	"github.com/paritysync/paritysync/limiter"
	"github.com/paritysync/paritysync/models"
)

// PushRequest sends one stored request through the limiter to its channel and
// records what came of it. The limiter holds the request's slot and, once it is due,
// drops the nights a newer version already went out for (superseded) and leases the
// rest until the outcome is known. A slot a few seconds away is waited out here; a
// later one comes back as a typed RateLimited error carrying the wait, for a durable
// timer. With in.NextReservation set, the lane's next request's slot is held once
// this one has its answer, and returned in PushResult.Next.
//
// A delivered request costs two PostgreSQL transactions and two Redis round trips:
//   - before the decision, one transaction records the request as sent (an upper
//     bound: the gate can be rebuilt from it after a Redis loss) and reads what is
//     not known yet of it and of the lane's next request;
//   - the decision (Dispatch) reads the gate's epoch in the same atomic step, so a
//     decision taken by a gate Redis lost is never acted on;
//   - nothing but the HTTP write follows a Send: a call that cannot start within the
//     slot's margin is cancelled before a byte is written and asks for a new slot;
//   - after the answer, one round trip (Settle) gives the limiter the back-off, the
//     rate-limit headers, the breaker's feed, the lease (kept when the answer does
//     not say whether the channel applied the push) and the next slot's hold, and
//     one transaction records the acknowledgement and the outcomes (its two
//     statements sent at once, one round trip, unless the request ends nights of
//     a range mutation or outgrows a statement).
//
// With in.Then set, a delivered push whose next slot is due within the short wait
// pushes the next request too, in the same attempt, while the attempt has room for
// another channel call: on a saturated channel one activity delivers several
// requests, each still waiting for its own slot. A chained push that comes to
// anything but an outcome (a wait, a 429, a failure) ends the chain unreported:
// the lane pushes that request itself, as Temporal would have retried it.
func (a *Activities) PushRequest(ctx context.Context, in models.PushInput) (models.PushResult, error) {
	defer heartbeatEvery(ctx, models.PushHeartbeatEvery)()
	res, err := a.pushOne(ctx, in)
	if err != nil || res.Deferred != nil || in.NextReservation == "" || len(in.Then) == 0 {
		return res, err
	}
	seq := append([]int{in.Next}, in.Then...)
	ids := append([]string{in.NextReservation}, in.ThenReservations...)
	for j := 0; j < len(seq) && j < len(ids); j++ {
		if !a.chainable(ctx, res.Next, seq[j]) {
			break
		}
		cin := models.PushInput{BatchID: in.BatchID, ChunkKey: in.ChunkKey, Index: seq[j], Reservation: ids[j]}
		if j+1 < len(seq) && j+1 < len(ids) {
			cin.Next, cin.NextReservation = seq[j+1], ids[j+1]
		}
		got, err := a.pushOne(ctx, cin)
		if err != nil || got.Deferred != nil {
			if err != nil {
				activity.GetLogger(ctx).Info("chained push ends the chain", "index", seq[j], "error", err)
			}
			res.Next = nil
			if err == nil && got.Deferred.Held {
				res.Next = &models.Slot{Index: seq[j], Wait: time.Duration(got.Deferred.Wait), About: got.About}
			}
			break
		}
		res.Next, got.Next = got.Next, nil
		res.Chained = append(res.Chained, got)
	}
	return res, nil
}

// chainRecords bounds the records around one chained push (its two PostgreSQL
// transactions and two Redis round trips), for the room a chained push needs.
const chainRecords = 3 * time.Second

// chainable reports whether the attempt pushes request i itself: its slot (held by
// the last push) is due within the short wait, and the attempt has room left for
// all a push may take: the in-process waits for its slot (maxSlotWaits short waits
// at most), the channel call and the records around it.
func (a *Activities) chainable(ctx context.Context, slot *models.Slot, i int) bool {
	short := a.ShortWait
	if short <= 0 {
		short = models.DefaultShortWait
	}
	if slot == nil || slot.Index != i || slot.Wait > short || ctx.Err() != nil {
		return false
	}
	call := config.MaxHTTPTimeout
	if a.Client != nil && a.Client.Timeout() > 0 {
		call = a.Client.Timeout()
	}
	deadline, ok := ctx.Deadline()
	return !ok || time.Until(deadline) >= (maxSlotWaits+1)*short+call+chainRecords
}

// pushOne is PushRequest of one request, in three steps: decide (read the request,
// ask the limiter for its slot), send (the channel call, within the slot's margin)
// and settle (tell the limiter and the store what the answer came to).
func (a *Activities) pushOne(ctx context.Context, in models.PushInput) (models.PushResult, error) {
	p, err := a.begin(ctx, in)
	if err != nil {
		return models.PushResult{}, err
	}
	for attempt := 1; ; attempt++ {
		res, sendNow, err := a.decide(ctx, p)
		if err != nil || !sendNow {
			return res, err
		}
		resp, late, err := a.send(ctx, p)
		if !late {
			return a.settle(ctx, p, resp, err)
		}
		// The slot is spent and nothing was written: give the nights back and ask
		// for a new slot rather than reach the channel later than its margin.
		a.release(ctx, p.lr)
		activity.GetLogger(ctx).Warn("call could not start within the margin of its slot; asking for a new one",
			"channel", p.req.Channel, "property", p.req.PropertyID, "attempt", attempt)
		if attempt >= maxLateAttempts {
			return models.PushResult{}, FailureError(models.ErrRateLimited, models.Failure{Wait: time.Second,
				Message: "call could not start within the margin of its slot"})
		}
	}
}

// push is one request on its way through pushOne's steps: what was read of it and
// of the lane's next request, and what the limiter decided.
type push struct {
	in   models.PushInput
	req  models.ChannelRequest
	next *models.ChannelRequest // the lane's next request, when in asks for its slot
	// lr asks for req's slot; nextLR, when set, holds next's once req has its answer.
	lr     limiter.Request
	nextLR *limiter.Request
	// d is the last decision; startBy, for a Send, the latest the call may start.
	d       limiter.Dispatched
	startBy time.Time
}

// heartbeatEvery heartbeats the activity of ctx every d, the first after d, until
// the function it returns is called: Temporal then notices within the activity's
// HeartbeatTimeout when the worker running it died.
func heartbeatEvery(ctx context.Context, d time.Duration) (stop func()) {
	if !activity.IsActivity(ctx) {
		return func() {}
	}
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(d)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-t.C:
				activity.RecordHeartbeat(ctx)
			}
		}
	}()
	return func() { close(done) }
}
