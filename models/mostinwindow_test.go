package models

import (
	"testing"
	"time"
)

func TestMostInWindowCountsAHalfOpenSpan(t *testing.T) {
	s := time.Second
	for _, tc := range []struct {
		name string
		ts   []time.Duration
		w    time.Duration
		want int
	}{
		{"empty", nil, time.Minute, 0},
		{"one", []time.Duration{5 * s}, time.Minute, 1},
		// 0 and 60 s are not in one 60 s window: the window is half-open.
		{"exactly a window apart", []time.Duration{0, 60 * s}, time.Minute, 1},
		{"just inside", []time.Duration{0, 60*s - 1}, time.Minute, 2},
		{"unsorted", []time.Duration{59 * s, 0, 30 * s, 61 * s, 62 * s}, time.Minute, 4},
		{"short window", []time.Duration{0, 1 * s, 2 * s, 6 * s, 7 * s}, 6 * s, 3},
	} {
		if got := MostInWindow(tc.ts, tc.w); got != tc.want {
			t.Errorf("%s: MostInWindow = %d, want %d", tc.name, got, tc.want)
		}
	}
	base := time.Date(2030, 4, 10, 12, 0, 0, 0, time.UTC)
	at := []time.Time{base.Add(70 * s), base, base.Add(59 * s), base.Add(65 * s)}
	if got := MostInWindowAt(at, time.Minute); got != 3 {
		t.Errorf("MostInWindowAt = %d, want 3 (59 s, 65 s, 70 s)", got)
	}
}
