package activities

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.temporal.io/sdk/activity"

	"github.com/paritysync/paritysync/activities/store"
	"github.com/paritysync/paritysync/channels"
	"github.com/paritysync/paritysync/limiter"
	"github.com/paritysync/paritysync/models"
)

// DiffChannel reads a channel's state back, one property at a time, and compares
// it with the desired state the store holds for every cell and family with a
// desired version in [From, To] — acknowledged or not. A cell is repaired when the
// channel does not hold the desired values (drift), or holds them without our
// acknowledgement (a lost answer, or a push never confirmed): the repair re-sends
// the desired values at the desired version, through the ordering gate, so nothing
// older than what was sent ever goes out and a lost acknowledgement is confirmed,
// never reverted. Repairs are stored as batch BatchID for a BatchSync to load.
//
// It holds one property's cells at a time: properties come from the store a page
// at a time, each property's repairs are stored as a part of the batch as soon as
// they are known, and the heartbeat records the last property done, so a retry
// resumes after it instead of paying every read again.
//
// Every read pays: a limiter slot at bulk priority and one unit of quota, a 429's
// Retry-After backs the whole channel off, and a 5xx is retried with backoff. A
// channel configured without read-back (read_back: false, as OpenTravel must be)
// cannot be compared: every cell with a desired version is re-sent instead, and
// counted as Resent.
func (a *Activities) DiffChannel(ctx context.Context, in models.DiffInput) (models.ChannelDrift, error) {
	p := diffProgress{Drift: models.ChannelDrift{Channel: in.Channel}}
	if activity.HasHeartbeatDetails(ctx) {
		if err := activity.GetHeartbeatDetails(ctx, &p); err != nil {
			// An unreadable heartbeat costs the reads again, not the result.
			activity.GetLogger(ctx).Warn("reconcile starts over", "channel", in.Channel, "error", err)
			p = diffProgress{Drift: models.ChannelDrift{Channel: in.Channel}}
		}
	}
	// A retry may find parts an earlier attempt stored past its last heartbeat.
	retried := activity.GetInfo(ctx).Attempt > 1
	for {
		props, err := a.Store.ChannelProperties(ctx, in.Channel, p.After, diffPageProperties)
		if err != nil {
			return p.Drift, err
		}
		if len(props) == 0 {
			break
		}
		for _, property := range props {
			repairs, err := a.diffProperty(ctx, in, property, &p)
			if err != nil {
				return p.Drift, err
			}
			if len(repairs) > 0 || retried {
				if err := a.Store.SaveBatchPart(ctx, in.BatchID, property, repairs); err != nil {
					return p.Drift, err
				}
			}
			p.Repairs += len(repairs)
			p.After = property
			activity.RecordHeartbeat(ctx, p)
		}
	}
	res := p.Drift
	if p.Repairs > 0 {
		var err error
		if res.PayloadKey, err = a.Store.SealBatch(ctx, in.BatchID); err != nil {
			return res, err
		}
	}
	activity.GetLogger(ctx).Info("reconciled", "channel", in.Channel, "checked", res.Checked,
		"drifted", res.Drifted, "unconfirmed", res.Unconfirmed, "resent", res.Resent, "reads", res.Reads)
	return res, nil
}

// diffPageProperties is how many property ids DiffChannel lists at a time.
const diffPageProperties = 100

// diffProgress is DiffChannel's heartbeat: the last property whose repairs are
// stored, and the counts up to it.
type diffProgress struct {
	After   string              `json:"after"`
	Drift   models.ChannelDrift `json:"drift"`
	Repairs int                 `json:"repairs"`
}

// diffProperty compares one property of in.Channel with its desired state, counting
// into p, and returns the repairs it needs. Repair ids name the property, so the
// ids of a batch written in parts are unique, and the same on a retry.
func (a *Activities) diffProperty(ctx context.Context, in models.DiffInput, property string, p *diffProgress) ([]models.Mutation, error) {
	var cells []store.CellState
	if err := a.Store.PropertyCellStates(ctx, in.Channel, property, in.From, in.To, func(c store.CellState) error {
		if c.Desired.Version > 0 {
			cells = append(cells, c)
		}
		return nil
	}); err != nil {
		return nil, err
	}
	if len(cells) == 0 {
		return nil, nil
	}
	var repairs []models.Mutation
	add := func(cs store.CellState) {
		repairs = append(repairs, repair(cs, fmt.Sprintf("%s:%s:%d", in.BatchID, property, len(repairs)+1)))
	}
	if cfg, ok := a.Channels[in.Channel]; ok && !cfg.ReadBack {
		for _, cs := range cells {
			p.Drift.Checked++
			p.Drift.Resent++
			add(cs)
		}
		return repairs, nil
	}
	st, err := a.readBack(ctx, in, property)
	if err != nil {
		return nil, err
	}
	p.Drift.Reads++
	held := make(map[[3]string]models.ARICell, len(st.Cells))
	for _, c := range st.Cells {
		held[[3]string{c.RoomTypeCode, c.RatePlanCode, c.Date.String()}] = c
	}
	for _, cs := range cells {
		p.Drift.Checked++
		c := cs.Cell
		switch {
		case !holds(cs.Family, cs.Desired, held[[3]string{c.RoomTypeCode, c.RatePlanCode, c.StayDate.String()}]):
			p.Drift.Drifted++
		case cs.Acked.Version < cs.Desired.Version:
			p.Drift.Unconfirmed++
		default:
			continue
		}
		add(cs)
	}
	return repairs, nil
}

// Read-back limits: a read waits inside the activity (heartbeating) for at most
// maxReadWait at a time, and gives up after maxReadAttempts answers that were not a
// success; the activity's bounded retry policy takes it from there.
const (
	maxReadWait     = 2 * time.Minute
	maxReadAttempts = 8
)

// readBack reads one property's state of in.Channel, paying the limiter for it.
func (a *Activities) readBack(ctx context.Context, in models.DiffInput, property string) (models.ARIState, error) {
	cfg, ok := a.Channels[in.Channel]
	if !ok {
		return models.ARIState{}, FailureError(models.ErrRejected, models.Failure{Message: "unknown channel " + in.Channel})
	}
	attempt := activity.GetInfo(ctx).Attempt
	for n := 1; ; n++ {
		// A read is not a family's request: it counts in the family with the largest
		// share, and has no lines, so the ordering gate is not consulted.
		r := limiter.Request{Channel: in.Channel, Family: cfg.Shares.Largest(), Property: property,
			Priority: models.PriorityBulk, Cost: 1, ID: fmt.Sprintf("read/%s/%s/%d/%d", in.BatchID, property, attempt, n)}
		if err := a.waitForSlot(ctx, r); err != nil {
			return models.ARIState{}, err
		}
		st, err := a.Client.ReadBack(ctx, in.Channel, property, in.From, in.To)
		if err == nil {
			return st, nil
		}
		var ce *channels.ChannelError
		if !errors.As(err, &ce) || n >= maxReadAttempts {
			return models.ARIState{}, fmt.Errorf("read back %s/%s: %w", in.Channel, property, err)
		}
		wait := time.Duration(0)
		switch ce.Response.Class {
		case channels.ClassThrottled:
			if ce.Response.ServerWait && ce.Response.RetryAfter > 0 {
				wait = ce.Response.RetryAfter
				if err := a.Limiter.Backoff(ctx, in.Channel, wait); err != nil {
					return models.ARIState{}, err
				}
			}
		case channels.ClassTransient:
		default:
			return models.ARIState{}, fmt.Errorf("read back %s/%s: %w", in.Channel, property, err)
		}
		a.Metrics.push(in.Channel, "read", ce.Response.Class)
		if wait <= 0 {
			wait = time.Duration(n) * time.Second
		}
		if err := sleep(ctx, min(wait, maxReadWait)); err != nil {
			return models.ARIState{}, err
		}
	}
}

// waitForSlot reserves r and waits, heartbeating, until its slot is due. A wait
// longer than maxReadWait (a pause, the quota) is a typed RateLimited error.
func (a *Activities) waitForSlot(ctx context.Context, r limiter.Request) error {
	for {
		d, err := a.Limiter.Reserve(ctx, r)
		if err != nil {
			return err
		}
		switch {
		case d.State == limiter.Send:
			return nil
		case d.Wait > maxReadWait:
			return FailureError(models.ErrRateLimited, models.Failure{Wait: d.Wait, Tier: string(d.Tier), Paused: d.PausedReason,
				Message: "read back " + r.Channel + ": " + string(d.State)})
		}
		if err := sleep(ctx, max(d.Wait, 10*time.Millisecond)); err != nil {
			return err
		}
	}
}

// sleep waits d, heartbeating every few seconds, or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	tick := time.NewTicker(5 * time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
			return nil
		case <-tick.C:
			if activity.IsActivity(ctx) {
				activity.RecordHeartbeat(ctx)
			}
		}
	}
}

// holds reports whether the channel's cell carries every value of family f that the
// desired line set; fields the line left unset are not the desired state's to judge.
func holds(f models.Family, want models.ARILine, got models.ARICell) bool {
	return got.Holds(f, want.Values)
}

// repair is the mutation that re-sends a cell's desired values at the desired
// version. It is a full sync, so bulk priority, except that a stop-sell or zero
// inventory stays urgent: ApplyDefaults decides, as for any PMS mutation.
func repair(cs store.CellState, id string) models.Mutation {
	m := models.MutationOf(cs.Cell, cs.Family, cs.Desired)
	m.ID, m.Version, m.FullSync = id, cs.Desired.Version, true
	return m
}
