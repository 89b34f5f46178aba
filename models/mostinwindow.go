package models

import (
	"slices"
	"time"
)

// MostInWindow is the most of the instants ts (offsets from any one origin) that
// fall within one half-open span [t, t+w) for any t: the count a channel's sliding
// window limit caps. The tests and `starter simulate` report "most in any window"
// with it, so both count alike.
func MostInWindow(ts []time.Duration, w time.Duration) int {
	s := slices.Clone(ts)
	slices.Sort(s)
	best, lo := 0, 0
	for hi := range s {
		for s[hi]-s[lo] >= w {
			lo++
		}
		best = max(best, hi-lo+1)
	}
	return best
}

// MostInWindowAt is MostInWindow of wall-clock times.
func MostInWindowAt(ts []time.Time, w time.Duration) int {
	if len(ts) == 0 {
		return 0
	}
	origin := slices.MinFunc(ts, time.Time.Compare)
	offsets := make([]time.Duration, len(ts))
	for i, t := range ts {
		offsets[i] = t.Sub(origin)
	}
	return MostInWindow(offsets, w)
}
