package activities

import (
	"context"
	"time"

	"github.com/paritysync/paritysync/limiter"
	"github.com/paritysync/paritysync/models"
)

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
