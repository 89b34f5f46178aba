package models

import (
	"cmp"
	"math"
	"slices"
	"time"
)

// PushCycle is how long a lane is reckoned to spend on one request besides waiting
// for its slot: dispatching the activity, the channel call and the records around
// it. It is about four times the 0.26 s a push took with 24 in flight against a
// no-op channel on the dev server (94 requests/s), so that a busier Temporal
// still keeps a channel's rate; a lane too many only holds a slot early.
const PushCycle = time.Second

// MinInFlight is the fewest pushes a batch keeps in flight on a channel: the lanes
// one ChannelSync child always had, so a slow channel still spends its burst at once.
const MinInFlight = 4

// DefaultMaxInFlight bounds the pushes a batch keeps in flight on one channel
// (PARITYSYNC_MAX_INFLIGHT).
const DefaultMaxInFlight = 32

// ChannelInFlight is how many pushes a batch keeps in flight on one channel, and
// the properties with work it was sized from.
type ChannelInFlight struct {
	Channel    string `json:"channel"`
	Properties int    `json:"properties"`
	InFlight   int    `json:"in_flight"`
}

// InFlight sizes the pushes to keep in flight on channel c for work on the given
// number of properties: its aggregate rate (per-property channels: the rate times
// the properties with work) times PushCycle, by Little's law; at least
// MinInFlight and at most limit (DefaultMaxInFlight when limit <= 0).
func (c ChannelConfig) InFlight(properties, limit int) int {
	if limit <= 0 {
		limit = DefaultMaxInFlight
	}
	perSecond := float64(c.RatePerMinute) / 60
	if c.Scope == ScopeProperty {
		perSecond *= float64(properties)
	}
	n := int(math.Ceil(perSecond * PushCycle.Seconds()))
	return min(max(n, MinInFlight), limit)
}

// PlanInFlight sizes every channel reqs go to, bounded by limit, sorted by channel;
// a channel missing from the map counts at DefaultRatePerMinute, limited per channel.
func PlanInFlight(reqs []ChannelRequest, channels map[string]ChannelConfig, limit int) []ChannelInFlight {
	props := map[string]map[string]struct{}{}
	for _, r := range reqs {
		if props[r.Channel] == nil {
			props[r.Channel] = map[string]struct{}{}
		}
		props[r.Channel][r.PropertyID] = struct{}{}
	}
	out := make([]ChannelInFlight, 0, len(props))
	for ch, ps := range props {
		cfg, ok := channels[ch]
		if !ok {
			cfg = NewChannelConfig(ch, DefaultRatePerMinute)
		}
		out = append(out, ChannelInFlight{Channel: ch, Properties: len(ps), InFlight: cfg.InFlight(len(ps), limit)})
	}
	slices.SortFunc(out, func(a, b ChannelInFlight) int { return cmp.Compare(a.Channel, b.Channel) })
	return out
}
