package activities

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptrace"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"go.temporal.io/sdk/activity"

	"github.com/paritysync/paritysync/channels"
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
//     one transaction records the acknowledgement and the outcomes.
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

// pushOne is PushRequest of one request.
func (a *Activities) pushOne(ctx context.Context, in models.PushInput) (models.PushResult, error) {
	log := activity.GetLogger(ctx)
	req, next, err := a.sending(ctx, in)
	if err != nil {
		return models.PushResult{}, payloadError(err)
	}
	cfg, ok := a.Channels[req.Channel]
	if !ok {
		return models.PushResult{}, FailureError(models.ErrRejected, models.Failure{Message: "unknown channel " + req.Channel})
	}
	lr := limiter.Request{Channel: req.Channel, Family: req.Family, Property: req.PropertyID,
		Priority: req.Priority, Cost: cfg.Cost(req), ID: in.Reservation, Lines: req.Lines}
	if lr.ID == "" {
		lr.ID = models.ReservationID(in.ChunkKey, in.Index)
	}
	var nextReq *limiter.Request
	if next != nil {
		if ncfg, ok := a.Channels[next.Channel]; ok {
			nextReq = &limiter.Request{Channel: next.Channel, Family: next.Family, Property: next.PropertyID,
				Priority: next.Priority, Cost: ncfg.Cost(*next), ID: in.NextReservation}
		}
	}
	if in.RefreshCredential {
		// Before the decision: a refresh takes as long as the credential's issuer.
		if err := a.Tokens.Refresh(ctx, req.Channel); err != nil {
			return models.PushResult{}, fmt.Errorf("refresh credential for %s: %w", req.Channel, err)
		}
	}

	var d limiter.Dispatched
	var resp channels.PushResponse
	var pushErr error
	for attempt := 1; ; attempt++ {
		var startBy time.Time
		if d, startBy, err = a.dispatch(ctx, lr); err != nil {
			return models.PushResult{}, err
		}
		switch d.State {
		case limiter.Send:
		case limiter.Superseded:
			log.Info("superseded before sending", "channel", req.Channel, "property", req.PropertyID,
				"family", req.Family, "updates", len(req.Refs))
			n, err := a.supersede(ctx, in.BatchID, req, req.Refs)
			if err != nil {
				return models.PushResult{}, err
			}
			settled := a.settle(ctx, limiter.Settlement{Request: lr, Next: nextReq})
			return models.PushResult{Superseded: n, Next: a.heldSlot(in, next, nextReq, settled), About: req.Summary()}, nil
		case limiter.Quota:
			a.Metrics.deny(req.Channel, string(d.Tier))
			msg := fmt.Sprintf("daily quota %d/%d", d.DailyUsed, d.DailyLimit)
			if d.FamilyStopped {
				msg = fmt.Sprintf("%s stopped by the channel's quota_exhausted", req.Family)
			}
			return models.PushResult{}, FailureError(models.ErrQuotaExhausted, models.Failure{Wait: d.Wait, Tier: string(d.Tier),
				Message: msg})
		default:
			// Waiting for budget is normal operation: a result the workflow waits
			// out with one timer, not a failed activity in the history.
			a.Metrics.deny(req.Channel, string(d.Tier))
			w := &models.Deferral{Wait: models.Duration(d.Wait), Tier: string(d.Tier), Paused: d.PausedReason,
				Held: d.State == limiter.Wait}
			if d.State == limiter.Breaker {
				// Named so the wait reads as the breaker's in the history.
				w.Reason = "circuit breaker open"
			}
			return models.PushResult{Deferred: w, About: req.Summary()}, nil
		}
		send, _ := req.WithoutNights(d.Dropped)
		var late bool
		resp, late, pushErr = a.pushWithin(ctx, send, startBy)
		if !late {
			break
		}
		// The slot is spent and nothing was written: give the nights back and ask
		// for a new slot rather than reach the channel later than its margin.
		a.release(ctx, lr)
		log.Warn("call could not start within the margin of its slot; asking for a new one",
			"channel", req.Channel, "property", req.PropertyID, "attempt", attempt)
		if attempt >= maxLateAttempts {
			return models.PushResult{}, FailureError(models.ErrRateLimited, models.Failure{Wait: time.Second,
				Message: "call could not start within the margin of its slot"})
		}
	}
	send, dropped := req.WithoutNights(d.Dropped)
	if pushErr != nil {
		if ctx.Err() == nil {
			// Nothing was written (no credential, say): the nights are free.
			a.release(ctx, lr)
		}
		// Otherwise the activity ended mid-call and the channel may still apply
		// the request: its lease runs out instead (limiter.Settlement.Unsettled).
		return models.PushResult{}, fmt.Errorf("push %s/%s: %w", req.Channel, req.Family, pushErr)
	}

	st := limiter.Settlement{Request: lr, Unsettled: unsettled(resp)}
	if resp.HasRateLimit {
		st.RateLimit = &limiter.RateLimit{Limit: resp.RateLimit.Limit, Remaining: resp.RateLimit.Remaining,
			Reset: resp.RateLimit.Reset}
	}
	if resp.Class != channels.ClassThrottled {
		// Throttling says nothing about the channel's health; any other answer
		// shows it up, but a 5xx or a timeout counts toward opening the breaker.
		healthy := resp.Class != channels.ClassTransient
		st.Healthy = &healthy
	}
	if resp.Class == channels.ClassThrottled && resp.ServerWait && resp.RetryAfter > 0 {
		st.Backoff = resp.RetryAfter // every worker holds back, not just this activity
	}
	delivered := resp.Class == channels.ClassCommitted || resp.Class == channels.ClassPartial
	if delivered {
		st.Next = nextReq
	}
	settled := a.settle(ctx, st)
	a.Metrics.push(req.Channel, string(req.Family), resp.Class)
	log.Info("pushed", "channel", req.Channel, "family", req.Family, "property", req.PropertyID,
		"lines", len(send.Lines), "dropped_nights", len(d.Dropped), "status", resp.Status, "class", resp.Class)

	f := models.Failure{Status: resp.Status, Message: resp.Message}
	switch resp.Class {
	case channels.ClassCommitted, channels.ClassPartial:
		res, err := a.acknowledge(ctx, in.BatchID, req, send, dropped, resp)
		if err != nil {
			return models.PushResult{}, err
		}
		res.Next, res.About = a.heldSlot(in, next, nextReq, settled), req.Summary()
		return res, nil
	case channels.ClassThrottled:
		f.Wait, f.ServerWait = resp.RetryAfter, resp.ServerWait
		return models.PushResult{}, FailureError(models.ErrThrottled, f)
	case channels.ClassTransient:
		return models.PushResult{}, FailureError(models.ErrTransient, f)
	case channels.ClassAuthExpired:
		return models.PushResult{}, FailureError(models.ErrAuthExpired, f)
	case channels.ClassQuotaExhausted:
		f.Wait = a.quotaStop(ctx, req.Channel, req.Family)
		return models.PushResult{}, FailureError(models.ErrQuotaExhausted, f)
	default:
		return models.PushResult{}, FailureError(models.ErrRejected, f)
	}
}

// unsettled reports whether resp leaves open whether the channel applied the push:
// no answer (a timeout, a lost connection), a 5xx, or a 2xx that confirmed nothing.
// Its nights then stay leased until the lease (HTTP timeout plus the channel's
// max_apply_delay) runs out, so a newer version is never sent while the channel may
// still apply this one after it. Any other answer (a commit, a 4xx, a 429) is
// definite and releases them at once.
func unsettled(resp channels.PushResponse) bool {
	if resp.Class != channels.ClassTransient {
		return false
	}
	return resp.Status == 0 || resp.Status >= 500 || (resp.Status >= 200 && resp.Status <= 299)
}

// maxGateAttempts bounds how often one PushRequest rebuilds a gate lost under it.
const maxGateAttempts = 3

// maxSlotWaits bounds how often one decision is waited out in process (a slot that
// moved, say, behind an urgent request) before the workflow waits with a timer.
const maxSlotWaits = 3

// maxLateAttempts bounds how often one PushRequest asks for a new slot because its
// call could not start within the margin of the last one.
const maxLateAttempts = 3

// sending records request in.Index as sent before anything is asked of the limiter,
// and returns it with the lane's next request, reading from the store only what
// this worker does not know yet, in the same transaction.
func (a *Activities) sending(ctx context.Context, in models.PushInput) (models.ChannelRequest, *models.ChannelRequest, error) {
	var known *models.ChannelRequest
	if r, ok := a.ahead.take(in.ChunkKey, in.Index); ok {
		known = &r
	}
	var next *models.ChannelRequest
	var ahead []int
	if in.NextReservation != "" {
		if r, ok := a.ahead.peek(in.ChunkKey, in.Next); ok {
			next = &r
		} else {
			ahead = append(ahead, in.Next)
		}
	}
	req, got, err := a.Store.RecordSending(ctx, in.ChunkKey, in.Index, known, ahead...)
	if err != nil {
		return req, nil, err
	}
	if r, ok := got[in.Next]; ok && in.NextReservation != "" {
		a.ahead.put(in.ChunkKey, in.Next, r)
		next = &r
	}
	return req, next, nil
}

// dispatch asks the limiter for lr's slot, waiting in process for a slot at most
// ShortWait away (a durable timer for a second or two would cost more than it
// saves), and rebuilds the ordering gate when Redis lost it. It returns the decision
// and, for a Send, the latest time the call may start: the slot's margin less how
// late the slot already was, counted from before the question was asked.
func (a *Activities) dispatch(ctx context.Context, lr limiter.Request) (limiter.Dispatched, time.Time, error) {
	short := a.ShortWait
	if short <= 0 {
		short = models.DefaultShortWait
	}
	if due, ok := a.held.take(lr.ID); ok {
		// This worker held the slot with the previous push: wait for it here instead
		// of asking only to hear how long to wait.
		if wait := time.Until(due); wait > 0 && wait <= short {
			if err := sleep(ctx, wait); err != nil {
				return limiter.Dispatched{}, time.Time{}, err
			}
		}
	}
	if !a.rebuilds.seenWhole(lr.Channel) {
		if _, err := a.gateEpoch(ctx, lr.Channel); err != nil {
			return limiter.Dispatched{}, time.Time{}, err
		}
		a.rebuilds.setWhole(lr.Channel, true)
	}
	rebuilt, waits := 0, 0
	for {
		asked := time.Now()
		d, err := a.Limiter.Dispatch(ctx, lr)
		if err != nil {
			// Fail closed: no decision, no call. A request the limiter can never
			// take is parked at once; anything else (Redis unreachable) is retried
			// by Temporal within its bound. The limiter's error names the channel.
			return d, time.Time{}, permanent(err)
		}
		if d.Epoch == "" {
			// Redis lost the gate that decided: it may have forgotten newer
			// versions. Give back what a Send took, rebuild the gate, ask again.
			a.rebuilds.setWhole(lr.Channel, false)
			if d.State == limiter.Send {
				a.release(ctx, lr)
			}
			logger(ctx).Warn("ordering gate lost; rebuilding", "channel", lr.Channel, "attempt", rebuilt+1)
			if rebuilt++; rebuilt > maxGateAttempts {
				return d, time.Time{}, FailureError(models.ErrRateLimited, models.Failure{Wait: time.Second,
					Message: "ordering gate lost; rebuilt, ask again"})
			}
			if _, err := a.gateEpoch(ctx, lr.Channel); err != nil {
				return d, time.Time{}, err
			}
			a.rebuilds.setWhole(lr.Channel, true)
			continue
		}
		if d.State == limiter.Wait && d.Wait <= short && waits < maxSlotWaits {
			waits++
			if err := sleep(ctx, d.Wait); err != nil {
				return d, time.Time{}, err
			}
			continue
		}
		return d, asked.Add(a.Limiter.Margin() - d.Late), nil
	}
}

// errLate is the cause a channel call is cancelled with when it could not start
// within the margin of its slot.
var errLate = errors.New("channel call could not start within the margin of its slot")

// pushWithin makes send's channel call unless it cannot start by startBy: a call
// that has not got its connection by then (the moment before the request is
// written) is cancelled with nothing written, and late is true. The channel then
// never sees a request later than the limiter's margin allows.
func (a *Activities) pushWithin(ctx context.Context, send models.ChannelRequest, startBy time.Time) (channels.PushResponse, bool, error) {
	const (
		pending int32 = iota
		started
		late
	)
	wait := time.Until(startBy)
	if wait <= 0 {
		return channels.PushResponse{}, true, nil
	}
	var state atomic.Int32
	callCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	callCtx = httptrace.WithClientTrace(callCtx, &httptrace.ClientTrace{
		GotConn: func(httptrace.GotConnInfo) { state.CompareAndSwap(pending, started) },
	})
	timer := time.AfterFunc(wait, func() {
		if state.CompareAndSwap(pending, late) {
			cancel(errLate)
		}
	})
	defer timer.Stop()
	resp, err := a.Client.Push(callCtx, send)
	if state.Load() == late {
		return channels.PushResponse{}, true, nil
	}
	return resp, false, err
}

// settle tells the limiter what the push came to, in one round trip. A part that
// fails costs little: a lost release only delays the nights' next request until the
// lease expires, a lost hold makes the next request ask for itself.
func (a *Activities) settle(ctx context.Context, s limiter.Settlement) limiter.Settled {
	got, err := a.Limiter.Settle(context.WithoutCancel(ctx), s)
	if err != nil {
		logger(ctx).Warn("limiter after the push", "channel", s.Request.Channel, "error", err)
	}
	if s.Healthy != nil && got.BreakerChanged {
		a.Metrics.breaker(s.Request.Channel, got.Breaker)
		logger(ctx).Warn("circuit breaker "+got.Breaker, "channel", s.Request.Channel)
	}
	if s.Next != nil && got.Next.State == limiter.Wait {
		a.held.put(s.Next.ID, time.Now().Add(got.Next.Wait))
	}
	return got
}

// heldSlot is the lane's next slot as Settle held it, nil when none was.
func (a *Activities) heldSlot(in models.PushInput, nextReq *models.ChannelRequest, next *limiter.Request, s limiter.Settled) *models.Slot {
	if next == nil || s.Next.State != limiter.Wait {
		return nil
	}
	slot := &models.Slot{Index: in.Next, Wait: s.Next.Wait}
	if nextReq != nil {
		slot.About = nextReq.Summary()
	}
	return slot
}

// release ends the lease a Send took; a lost release only delays the nights' next
// request until the lease expires.
func (a *Activities) release(ctx context.Context, lr limiter.Request) {
	if err := a.Limiter.Release(context.WithoutCancel(ctx), lr); err != nil {
		logger(ctx).Warn("release lease", "channel", lr.Channel, "error", err)
	}
}

// ReserveSlots holds the slots of the first request of each of a ChannelSync's lanes,
// in one activity instead of one push per lane that would only come back with a
// wait. A request the limiter cannot hold a slot for now is left out: its lane asks
// when it pushes. The requests are read in one statement and kept for their pushes.
func (a *Activities) ReserveSlots(ctx context.Context, in models.ReserveSlotsInput) ([]models.Slot, error) {
	reqs, err := a.Store.Requests(ctx, in.ChunkKey, in.Indexes...)
	if err != nil {
		// Not this activity's failure: each lane then asks for itself.
		logger(ctx).Warn("read the lanes' first requests", "chunk", in.ChunkKey, "error", err)
		return nil, nil
	}
	var out []models.Slot
	for k, i := range in.Indexes {
		req, ok := reqs[i]
		if !ok || k >= len(in.Reservations) {
			continue
		}
		a.ahead.put(in.ChunkKey, i, req)
		cfg, ok := a.Channels[req.Channel]
		if !ok {
			continue
		}
		d, err := a.Limiter.Reserve(ctx, limiter.Request{Channel: req.Channel, Family: req.Family,
			Property: req.PropertyID, Priority: req.Priority, Cost: cfg.Cost(req), ID: in.Reservations[k], Hold: true})
		if err != nil || d.State != limiter.Wait {
			continue
		}
		a.held.put(in.Reservations[k], time.Now().Add(d.Wait))
		out = append(out, models.Slot{Index: i, Wait: d.Wait, About: req.Summary()})
	}
	return out, nil
}

// maxRemembered bounds each of the worker's memories of lanes; a worker has a few
// hundred lanes in flight at most, and a forgotten entry only costs a read or a
// decision.
const maxRemembered = 4096

// requestCache keeps stored requests a push read ahead for the lane's next push. A
// chunk's requests do not change while its lanes run (a retried PrepareBatch
// rewrites them before any lane starts), and an entry is taken by its push, so a
// retry reads the store again.
type requestCache struct {
	mu   sync.Mutex
	reqs map[string]models.ChannelRequest
}

func cacheKey(chunkKey string, i int) string { return chunkKey + "#" + strconv.Itoa(i) }

func (c *requestCache) put(chunkKey string, i int, r models.ChannelRequest) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.reqs == nil || len(c.reqs) >= maxRemembered {
		c.reqs = map[string]models.ChannelRequest{}
	}
	c.reqs[cacheKey(chunkKey, i)] = r
}

func (c *requestCache) peek(chunkKey string, i int) (models.ChannelRequest, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	r, ok := c.reqs[cacheKey(chunkKey, i)]
	return r, ok
}

func (c *requestCache) take(chunkKey string, i int) (models.ChannelRequest, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := cacheKey(chunkKey, i)
	r, ok := c.reqs[k]
	delete(c.reqs, k)
	return r, ok
}

// heldSlots keeps, per reservation, when the slot this worker held for it is due
// by the local clock (measured after the answer came, so never early).
type heldSlots struct {
	mu  sync.Mutex
	due map[string]time.Time
}

func (h *heldSlots) put(id string, due time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.due == nil || len(h.due) >= maxRemembered {
		h.due = map[string]time.Time{}
	}
	h.due[id] = due
}

func (h *heldSlots) take(id string) (time.Time, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	due, ok := h.due[id]
	delete(h.due, id)
	return due, ok
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
