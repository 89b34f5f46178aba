package sim

import "time"

// window holds the times of the events of the last length, oldest first.
type window struct {
	length time.Duration
	times  []time.Time
}

// prune drops events that have left the window ending at now.
func (w *window) prune(now time.Time) {
	cut := 0
	for cut < len(w.times) && !now.Before(w.times[cut].Add(w.length)) {
		cut++
	}
	if cut > 0 {
		w.times = append(w.times[:0], w.times[cut:]...)
	}
}

// count is the number of events in the window ending at now.
func (w *window) count(now time.Time) int {
	w.prune(now)
	return len(w.times)
}

// add records an event at now and returns the new count.
func (w *window) add(now time.Time) int {
	w.prune(now)
	w.times = append(w.times, now)
	return len(w.times)
}

// nextFree is how long until the oldest event leaves the window, freeing a slot.
func (w *window) nextFree(now time.Time) time.Duration {
	w.prune(now)
	if len(w.times) == 0 {
		return 0
	}
	return w.times[0].Add(w.length).Sub(now)
}

// clear is how long until every event has left the window.
func (w *window) clear(now time.Time) time.Duration {
	w.prune(now)
	if len(w.times) == 0 {
		return 0
	}
	return w.times[len(w.times)-1].Add(w.length).Sub(now)
}
