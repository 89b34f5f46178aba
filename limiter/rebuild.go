package limiter

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	"github.com/paritysync/paritysync/models"
)

// The ordering gate is Redis's working copy of what the system of record keeps: the
// newest version sent per night. After Redis restarts empty, the gate's owner loads
// it back (LoadGate) and then marks the channel's gate as whole (MarkGateRebuilt),
// which also starts the channel's buckets empty. The mark is a random epoch in
//
//	<prefix>{<channel>}:gate_epoch    TTL Options.GateTTL, renewed by every rebuild
//
// A Redis loss deletes it. A caller that read epoch E before Reserve and reads E
// again after Reserve admitted a request knows the gate that admitted it was whole;
// any other answer means "do not send: rebuild and ask again".

// GateNight is the newest version sent for one night of a room and rate plan.
type GateNight struct {
	Room, Plan string
	Night      models.Date
	Version    int64
}

// gateRangesPerCall bounds one gate_load call, so a rebuild never blocks Redis for
// long.
const gateRangesPerCall = 500

func (ck channelKeys) gateEpoch() string { return ck.base + "gate_epoch" }

// GateEpoch returns channel's gate epoch, "" when the gate has not been rebuilt since
// Redis last lost it (or since it first started).
func (l *Limiter) GateEpoch(ctx context.Context, channel string) (string, error) {
	ck, err := l.channel(channel)
	if err != nil {
		return "", fmt.Errorf("gate epoch %s: %w", channel, err)
	}
	epoch, err := gateEpochScript.Run(ctx, l.rdb, []string{ck.gateEpoch()}).Text()
	if err != nil {
		return "", fmt.Errorf("gate epoch %s: %w", channel, err)
	}
	return epoch, nil
}

// gateRange is a run of consecutive nights of one room and rate plan sent at one
// version: what the gate holds, and what LoadGate sends it.
type gateRange struct {
	key      string
	from, to int64
	version  int64
}

// gateRanges merges nights into ranges: per room and rate plan, consecutive nights
// of one version. Of a night listed twice, the newest version counts.
func gateRanges(nights []GateNight) []gateRange {
	ns := slices.Clone(nights)
	slices.SortFunc(ns, func(a, b GateNight) int {
		return cmp.Or(cmp.Compare(a.Room, b.Room), cmp.Compare(a.Plan, b.Plan),
			cmp.Compare(dayNumber(a.Night), dayNumber(b.Night)), cmp.Compare(b.Version, a.Version))
	})
	var out []gateRange
	for _, n := range ns {
		key, day := n.Room+"|"+n.Plan, dayNumber(n.Night)
		if k := len(out) - 1; k >= 0 && out[k].key == key {
			last := &out[k]
			if day == last.to {
				continue // the same night again, at an older version
			}
			if day == last.to+1 && n.Version == last.version {
				last.to = day
				continue
			}
		}
		out = append(out, gateRange{key: key, from: day, to: day, version: n.Version})
	}
	return out
}

// LoadGate raises the gate of (channel, property, family) to at least the given
// versions; versions already newer stay, and nights before the property's today
// are left out. It returns how many nights it raised.
func (l *Limiter) LoadGate(ctx context.Context, channel, property string, f models.Family, nights []GateNight) (int, error) {
	ck, err := l.channel(channel)
	if err != nil {
		return 0, fmt.Errorf("load gate %s: %w", channel, err)
	}
	key := ck.base + "gate:" + property + ":" + string(f)
	cutoff := l.cutoff(property)
	raised := 0
	for rs := gateRanges(nights); len(rs) > 0; {
		part := rs[:min(gateRangesPerCall, len(rs))]
		rs = rs[len(part):]
		args := make([]any, 0, 2+4*len(part))
		args = append(args, l.opts.GateTTL.Milliseconds(), cutoff)
		for _, r := range part {
			if r.version < 1 {
				return raised, fmt.Errorf("load gate %s/%s/%s: %s night %d: version %d must be >= 1: %w",
					channel, property, f, r.key, r.from, r.version, ErrInvalidRequest)
			}
			args = append(args, r.key, r.from, r.to, r.version)
		}
		got, err := gateLoadScript.Run(ctx, l.rdb, []string{key}, args...).Int()
		if err != nil {
			return raised, fmt.Errorf("load gate %s/%s/%s: %w", channel, property, f, err)
		}
		raised += got
	}
	return raised, nil
}

// GateScope is a (property, family) whose gate was rebuilt.
type GateScope struct {
	Property string
	Family   models.Family
}

// MarkGateRebuilt records that channel's gate is whole again under epoch, unless
// another worker marked it first, and returns the epoch in force. Marking starts
// the channel's window empty — per channel, or for each given scope on a channel
// that limits per property — so the first requests after a Redis loss are paced,
// not a full burst on top of what the channel's own window may still hold.
func (l *Limiter) MarkGateRebuilt(ctx context.Context, channel, epoch string, scopes []GateScope) (string, error) {
	ck, err := l.channel(channel)
	if err != nil {
		return "", fmt.Errorf("mark gate %s: %w", channel, err)
	}
	if epoch == "" {
		return "", fmt.Errorf("mark gate %s: empty epoch: %w", channel, ErrInvalidRequest)
	}
	keys := []string{ck.gateEpoch()}
	for _, s := range scopes {
		if k := ck.base + "tat:" + ck.scope(s.Property, s.Family); !slices.Contains(keys, k) {
			keys = append(keys, k)
		}
	}
	if ck.cfg.Scope != models.ScopeProperty && len(keys) == 1 {
		keys = append(keys, ck.base+"tat:"+ck.scope("", ""))
	}
	got, err := gateMarkScript.Run(ctx, l.rdb, keys, epoch, l.opts.GateTTL.Milliseconds(),
		ck.cfg.RatePerMinute, max(1, ck.cfg.Burst), l.opts.Margin.Milliseconds(), ck.cfg.WindowLength().Milliseconds()).Text()
	if err != nil {
		return "", fmt.Errorf("mark gate %s: %w", channel, err)
	}
	return got, nil
}
