package activities

import (
	"context"
	"fmt"
	"slices"
	"time"

	"go.temporal.io/sdk/activity"

	"github.com/paritysync/paritysync/activities/store"
	"github.com/paritysync/paritysync/channels"
	"github.com/paritysync/paritysync/limiter"
	"github.com/paritysync/paritysync/models"
)

// settle records what the channel's answer came to: the limiter hears of it in one
// round trip, the store records a delivery's acknowledgement, and any other answer
// comes back as the typed error the workflow acts on.
func (a *Activities) settle(ctx context.Context, p *push, resp channels.PushResponse, pushErr error) (models.PushResult, error) {
	req := p.req
	sent, dropped := req.WithoutNights(p.d.Dropped)
	if pushErr != nil {
		if ctx.Err() == nil {
			// Nothing was written (no credential, say): the nights are free.
			a.release(ctx, p.lr)
		}
		// Otherwise the activity ended mid-call and the channel may still apply
		// the request: its lease runs out instead (limiter.Settlement.Unsettled).
		return models.PushResult{}, fmt.Errorf("push %s/%s: %w", req.Channel, req.Family, pushErr)
	}
	settled := a.settleLimiter(ctx, settlement(p, resp))
	a.Metrics.push(req.Channel, string(req.Family), resp.Class)
	activity.GetLogger(ctx).Info("pushed", "channel", req.Channel, "family", req.Family, "property", req.PropertyID,
		"lines", len(sent.Lines), "dropped_nights", len(p.d.Dropped), "status", resp.Status, "class", resp.Class)

	f := models.Failure{Status: resp.Status, Message: resp.Message}
	switch resp.Class {
	case channels.ClassCommitted, channels.ClassPartial:
		res, err := a.acknowledge(ctx, p.in.BatchID, req, sent, dropped, resp)
		if err != nil {
			return models.PushResult{}, err
		}
		res.Next, res.About = a.heldSlot(p.in, p.next, p.nextLR, settled), req.Summary()
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

// settlement is what the limiter hears of p's answer: the back-off after a 429 with
// Retry-After, the rate-limit headers, the breaker's feed, whether the lease stays
// (unsettled) and, after a delivery, the hold of the lane's next slot.
func settlement(p *push, resp channels.PushResponse) limiter.Settlement {
	st := limiter.Settlement{Request: p.lr, Unsettled: unsettled(resp)}
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
	if resp.Class == channels.ClassCommitted || resp.Class == channels.ClassPartial {
		st.Next = p.nextLR
	}
	return st
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

// settleLimiter tells the limiter what the push came to, in one round trip. A part that
// fails costs little: a lost release only delays the nights' next request until the
// lease expires, a lost hold makes the next request ask for itself.
func (a *Activities) settleLimiter(ctx context.Context, s limiter.Settlement) limiter.Settled {
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

// acknowledge records what the channel confirmed of send (cut from orig by the
// gate): every line of a 2xx, the accepted lines of a partial success, and the refs
// the gate dropped as superseded, in one transaction. The failed lines are handed
// back numbered as in orig, so they can be parked from it.
func (a *Activities) acknowledge(ctx context.Context, batchID string, orig, send models.ChannelRequest,
	dropped []models.MutationRef, resp channels.PushResponse) (models.PushResult, error) {
	res := models.PushResult{ConfirmationID: resp.ConfirmationID}
	var failed []int
	for _, lf := range resp.Failed {
		failed = append(failed, lf.Line)
		res.Failed = append(res.Failed, models.FailedLine{Line: originLine(orig, send, lf.Line), Code: lf.Code, Message: lf.Message})
	}
	for _, ref := range send.Refs {
		if slices.Contains(failed, ref.Line) {
			res.FailedRefs = append(res.FailedRefs, ref)
		}
	}
	var err error
	res.Committed, res.Superseded, err = a.Store.RecordAcknowledged(ctx, store.Ack{BatchID: batchID, Request: send,
		ConfirmationID: resp.ConfirmationID, FailedLines: failed, Superseded: dropped})
	if err != nil {
		return models.PushResult{}, err
	}
	a.Metrics.commit(send.Channel, res.Committed)
	return res, nil
}

// originLine is the index in orig of the line that carries line i of sent, a cut of
// orig made by WithoutNights.
func originLine(orig, sent models.ChannelRequest, i int) int {
	if i < 0 || i >= len(sent.Lines) {
		return i
	}
	l := sent.Lines[i]
	for k, o := range orig.Lines {
		if o.RoomTypeCode == l.RoomTypeCode && o.RatePlanCode == l.RatePlanCode && o.Covers(l.From) {
			return k
		}
	}
	return i
}

// supersede records refs of req as superseded by a newer version the gate already
// sent, and returns how many of them are superseded as stored.
func (a *Activities) supersede(ctx context.Context, batchID string, req models.ChannelRequest, refs []models.MutationRef) (int, error) {
	if len(refs) == 0 {
		return 0, nil
	}
	os := make([]store.MutationOutcome, len(refs))
	for i, ref := range refs {
		os[i] = store.MutationOutcome{MutationID: ref.ID, Channel: req.Channel, Family: req.Family,
			Outcome: models.OutcomeSuperseded, Reason: "a newer version was sent", Night: ref.StayDate, Nights: ref.Nights}
	}
	counts, err := a.Store.RecordOutcomes(ctx, batchID, os)
	if err != nil {
		return 0, err
	}
	return counts[models.OutcomeSuperseded], nil
}

// quotaStop holds every worker off family f of channel until its daily quota resets
// (the next UTC midnight by the Redis clock), after the channel said that quota is
// spent: no further request of f goes out to be refused, and the channel's other
// families go on. It returns the wait; the stop shows in `starter quota` and
// intake refuses changes of f meanwhile.
func (a *Activities) quotaStop(ctx context.Context, channel string, f models.Family) time.Duration {
	wait := time.Hour // the reset cannot be read: hold off a while, then ask again
	if st, err := a.Limiter.Status(ctx, channel); err == nil && st.QuotaResetsIn > 0 {
		wait = st.QuotaResetsIn
	}
	if err := a.Limiter.StopFamily(ctx, channel, f, wait); err != nil {
		activity.GetLogger(ctx).Warn("quota stop", "channel", channel, "family", f, "error", err)
	}
	activity.GetLogger(ctx).Warn("channel quota exhausted: family stopped until the reset", "channel", channel,
		"family", f, "wait", wait)
	return wait
}
