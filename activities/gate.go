package activities

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/google/uuid"
	"go.temporal.io/sdk/activity"

	"github.com/paritysync/paritysync/activities/store"
	"github.com/paritysync/paritysync/limiter"
	"github.com/paritysync/paritysync/models"
)

// gateRebuilds serializes this worker's rebuilds of one channel's gate, so its
// activities wait for one rebuild instead of each loading the gate again.
type gateRebuilds struct {
	mu       sync.Mutex
	building map[string]*sync.Mutex
	// whole holds the channels whose gate this worker last saw whole: the first
	// push to any other checks (and rebuilds) the gate before it asks for a slot,
	// rather than spend a slot on a decision it then cannot trust.
	whole map[string]bool
}

func (g *gateRebuilds) seenWhole(channel string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.whole[channel]
}

func (g *gateRebuilds) setWhole(channel string, whole bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.whole == nil {
		g.whole = map[string]bool{}
	}
	g.whole[channel] = whole
}

func (g *gateRebuilds) lock(channel string) *sync.Mutex {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.building == nil {
		g.building = map[string]*sync.Mutex{}
	}
	m := g.building[channel]
	if m == nil {
		m = &sync.Mutex{}
		g.building[channel] = m
	}
	return m
}

// gateEpoch returns the epoch of channel's ordering gate in Redis, rebuilding the
// gate from the store's sent versions first when Redis lost it (no epoch). The
// epoch is read from Redis on every call: only Redis can tell that it lost it.
func (a *Activities) gateEpoch(ctx context.Context, channel string) (string, error) {
	epoch, err := a.Limiter.GateEpoch(ctx, channel)
	if err != nil {
		return "", err
	}
	if epoch != "" {
		return epoch, nil
	}
	m := a.rebuilds.lock(channel)
	m.Lock()
	defer m.Unlock()
	if epoch, err = a.Limiter.GateEpoch(ctx, channel); err != nil || epoch != "" {
		return epoch, err // another worker's rebuild, or this worker's, finished meanwhile
	}
	return a.RebuildGate(ctx, channel)
}

// rebuildHorizon is how far back the gate rebuild reads sent versions: the gate is
// consulted for nights still on sale, and a day covers every time zone.
const rebuildHorizon = 24 * time.Hour

// RebuildGate loads channel's ordering gate in Redis from the sent versions the store
// holds, then marks it whole, which also starts the channel's limiter buckets empty.
// Loading only raises versions, so it is safe while other workers send. It returns
// the epoch in force.
func (a *Activities) RebuildGate(ctx context.Context, channel string) (string, error) {
	start := time.Now()
	type scope struct {
		property string
		family   models.Family
	}
	var cur scope
	var nights []limiter.GateNight
	var scopes []limiter.GateScope
	total := 0
	flush := func() error {
		if len(nights) == 0 {
			return nil
		}
		if _, err := a.Limiter.LoadGate(ctx, channel, cur.property, cur.family, nights); err != nil {
			return err
		}
		scopes = append(scopes, limiter.GateScope{Property: cur.property, Family: cur.family})
		total += len(nights)
		nights = nights[:0]
		return nil
	}
	from := models.DateOf(time.Now().Add(-rebuildHorizon))
	err := a.Store.SentVersions(ctx, channel, from, func(sv store.SentVersion) error {
		s := scope{sv.Cell.PropertyID, sv.Family}
		if s != cur {
			if err := flush(); err != nil {
				return err
			}
			cur = s
		}
		nights = append(nights, limiter.GateNight{Room: sv.Cell.RoomTypeCode, Plan: sv.Cell.RatePlanCode,
			Night: sv.Cell.StayDate, Version: sv.Version})
		return nil
	})
	if err == nil {
		err = flush()
	}
	if err != nil {
		return "", fmt.Errorf("rebuild gate of %s: %w", channel, err)
	}
	epoch, err := a.Limiter.MarkGateRebuilt(ctx, channel, uuid.NewString(), scopes)
	if err != nil {
		return "", err
	}
	logger(ctx).Warn("ordering gate rebuilt from the store", "channel", channel, "nights", total,
		"scopes", len(scopes), "took", time.Since(start).Round(time.Millisecond))
	return epoch, nil
}

// logger is the activity's logger, or the default one outside an activity.
func logger(ctx context.Context) interface {
	Warn(string, ...any)
} {
	if activity.IsActivity(ctx) {
		return activity.GetLogger(ctx)
	}
	return slog.Default()
}
