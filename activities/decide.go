package activities

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.temporal.io/sdk/activity"

	"github.com/paritysync/paritysync/limiter"
	"github.com/paritysync/paritysync/models"
)

// begin reads request in.Index, recording it as sent, with the lane's next request;
// refreshes the credential when in asks (before the decision: a refresh takes as
// long as the credential's issuer); and builds what the limiter is asked.
func (a *Activities) begin(ctx context.Context, in models.PushInput) (*push, error) {
	req, next, err := a.sending(ctx, in)
	if err != nil {
		return nil, payloadError(err)
	}
	cfg, ok := a.Channels[req.Channel]
	if !ok {
		return nil, FailureError(models.ErrRejected, models.Failure{Message: "unknown channel " + req.Channel})
	}
	p := &push{in: in, req: req, next: next, lr: limiter.Request{Channel: req.Channel, Family: req.Family,
		Property: req.PropertyID, Priority: req.Priority, Cost: cfg.Cost(req), ID: in.Reservation, Lines: req.Lines}}
	if p.lr.ID == "" {
		p.lr.ID = models.ReservationID(in.ChunkKey, in.Index)
	}
	if next != nil {
		if ncfg, ok := a.Channels[next.Channel]; ok {
			p.nextLR = &limiter.Request{Channel: next.Channel, Family: next.Family, Property: next.PropertyID,
				Priority: next.Priority, Cost: ncfg.Cost(*next), ID: in.NextReservation}
		}
	}
	if in.RefreshCredential {
		if err := a.Tokens.Refresh(ctx, req.Channel); err != nil {
			return nil, fmt.Errorf("refresh credential for %s: %w", req.Channel, err)
		}
	}
	return p, nil
}

// decide asks the limiter for p's slot (dispatch) and reports whether to send now.
// Any other decision is the push's result: superseded (recorded as such, and the
// next slot held), the daily quota's typed error, or a deferral.
func (a *Activities) decide(ctx context.Context, p *push) (models.PushResult, bool, error) {
	var err error
	if p.d, p.startBy, err = a.dispatch(ctx, p.lr); err != nil {
		return models.PushResult{}, false, err
	}
	req, d := p.req, p.d
	switch d.State {
	case limiter.Send:
		return models.PushResult{}, true, nil
	case limiter.Superseded:
		activity.GetLogger(ctx).Info("superseded before sending", "channel", req.Channel, "property", req.PropertyID,
			"family", req.Family, "updates", len(req.Refs))
		n, err := a.supersede(ctx, p.in.BatchID, req, req.Refs)
		if err != nil {
			return models.PushResult{}, false, err
		}
		settled := a.settleLimiter(ctx, limiter.Settlement{Request: p.lr, Next: p.nextLR})
		return models.PushResult{Superseded: n, Next: a.heldSlot(p.in, p.next, p.nextLR, settled), About: req.Summary()}, false, nil
	case limiter.Quota:
		a.Metrics.deny(req.Channel, string(d.Tier))
		msg := fmt.Sprintf("daily quota %d/%d", d.DailyUsed, d.DailyLimit)
		if d.FamilyStopped {
			msg = fmt.Sprintf("%s stopped by the channel's quota_exhausted", req.Family)
		}
		return models.PushResult{}, false, FailureError(models.ErrQuotaExhausted, models.Failure{Wait: d.Wait,
			Tier: string(d.Tier), Message: msg})
	default:
		// Waiting for budget is normal operation: a result the workflow waits out
		// with one timer, not a failed activity in the history.
		a.Metrics.deny(req.Channel, string(d.Tier))
		w := &models.Deferral{Wait: models.Duration(d.Wait), Tier: string(d.Tier), Paused: d.PausedReason,
			Held: d.State == limiter.Wait}
		if d.State == limiter.Breaker {
			// Named so the wait reads as the breaker's in the history.
			w.Reason = "circuit breaker open"
		}
		return models.PushResult{Deferred: w, About: req.Summary()}, false, nil
	}
}

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

// permanent types the limiter errors that no retry can cure (a family without a
// budget share, a channel the limiter does not know, an invalid request) as
// Rejected, so the request is dead-lettered with the reason instead of retried.
func permanent(err error) error {
	if errors.Is(err, limiter.ErrNoBudget) || errors.Is(err, limiter.ErrUnknownChannel) ||
		errors.Is(err, limiter.ErrInvalidRequest) {
		return FailureError(models.ErrRejected, models.Failure{Message: err.Error()})
	}
	return err
}

// maxGateAttempts bounds how often one PushRequest rebuilds a gate lost under it.
const maxGateAttempts = 3

// maxSlotWaits bounds how often one decision is waited out in process (a slot that
// moved, say, behind an urgent request) before the workflow waits with a timer.
const maxSlotWaits = 3
