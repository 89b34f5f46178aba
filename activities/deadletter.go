package activities

import (
	"context"
	"errors"
	"strconv"

	"go.temporal.io/sdk/activity"

	"github.com/paritysync/paritysync/activities/store"
	"github.com/paritysync/paritysync/models"
)

// RecordDeadLetter parks a request, or the listed lines of it, as a dead letter in
// the store, with the dead-lettered outcome of each of its updates.
func (a *Activities) RecordDeadLetter(ctx context.Context, in models.DeadLetterInput) (models.DeadLetterResult, error) {
	if in.Index != models.WholeChunk {
		res, err := a.park(ctx, in)
		if errors.Is(err, store.ErrBatchNotFound) {
			activity.GetLogger(ctx).Error("request gone before it could be parked; reconciliation re-sends its cells",
				"chunk", in.ChunkKey, "request", in.Index, "batch", in.BatchID)
			return res, nil
		}
		return res, err
	}
	var total models.DeadLetterResult
	for i := 0; ; i++ {
		in.Index = i
		res, err := a.park(ctx, in)
		if errors.Is(err, store.ErrBatchNotFound) {
			return total, nil // past the chunk's last request
		}
		if err != nil {
			return total, err
		}
		total.Updates += res.Updates
		total.EntryID = res.EntryID
	}
}

// park parks request in.Index (or the listed lines of it). A request that is gone
// from the store (its batch released) cannot be parked: its cells are left to
// reconciliation, which re-sends the desired state of every unacknowledged cell.
func (a *Activities) park(ctx context.Context, in models.DeadLetterInput) (models.DeadLetterResult, error) {
	req, err := a.Store.Request(ctx, in.ChunkKey, in.Index)
	if err != nil {
		return models.DeadLetterResult{}, err
	}
	if len(in.Lines) > 0 {
		req = onlyLines(req, in.Lines)
	}
	id, parked, err := a.Store.ParkDeadLetter(ctx, store.DeadLetter{BatchID: in.BatchID, Reason: in.Reason,
		Status: in.Status, Message: in.Message, Request: req})
	if err != nil {
		return models.DeadLetterResult{}, err
	}
	res := models.DeadLetterResult{Updates: len(req.Refs), EntryID: strconv.FormatInt(id, 10)}
	if in.Reason == models.ReasonChildFailed {
		// A failed child's chunk is parked whole, committed requests too: only the
		// updates that had no outcome were dead-lettered.
		if res.Updates, err = a.Store.DeadLettered(ctx, in.BatchID, req); err != nil {
			return models.DeadLetterResult{}, err
		}
	}
	if !parked {
		activity.GetLogger(ctx).Debug("already dead-lettered", "channel", req.Channel, "batch", in.BatchID, "request", in.Index)
		return res, nil
	}
	a.Metrics.park(req.Channel, in.Reason, res.Updates)
	activity.GetLogger(ctx).Warn("dead-lettered", "channel", req.Channel, "batch", in.BatchID,
		"reason", in.Reason, "status", in.Status, "updates", res.Updates, "entry", id)
	return res, nil
}

// onlyLines is r cut down to the given lines, with refs renumbered to match.
func onlyLines(r models.ChannelRequest, lines []int) models.ChannelRequest {
	keep := map[int]int{}
	out := r
	out.Lines, out.Refs = nil, nil
	for _, l := range lines {
		if l >= 0 && l < len(r.Lines) {
			if _, dup := keep[l]; !dup {
				keep[l] = len(out.Lines)
				out.Lines = append(out.Lines, r.Lines[l])
			}
		}
	}
	for _, ref := range r.Refs {
		if n, ok := keep[ref.Line]; ok {
			ref.Line = n
			out.Refs = append(out.Refs, ref)
		}
	}
	return out
}
