package channels

import (
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// ParseRetryAfter reads a Retry-After value: delta-seconds or an HTTP-date
// (IMF-fixdate, RFC 850 or asctime), a date measured from now — the answer's
// ChannelNow, not the local clock. A date in the past means "now" (0, true).
// Negative, malformed or overflowing values are not usable (0, false) so the caller
// falls back to its own backoff. A usable wait is capped by max when max > 0.
func ParseRetryAfter(v string, now time.Time, max time.Duration) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	var wait time.Duration
	if isDigits(v) {
		secs, err := strconv.ParseUint(v, 10, 64)
		if err != nil || secs > uint64(math.MaxInt64/int64(time.Second)) {
			return 0, false
		}
		wait = time.Duration(secs) * time.Second
	} else {
		at, err := http.ParseTime(v)
		if err != nil {
			return 0, false
		}
		wait = at.Sub(now)
		// Sub saturates instead of overflowing; a saturated wait is not a real one.
		if wait == math.MaxInt64 {
			return 0, false
		}
		if wait < 0 {
			wait = 0
		}
	}
	if max > 0 && wait > max {
		wait = max
	}
	return wait, true
}

// ChannelNow is the channel's time when it answered: the answer's Date header, or
// local when it has none or an unreadable one. Retry-After dates and rate-limit
// resets given as times are measured from it, so a skew between the channel's
// clock and ours does not shorten or lengthen a wait.
func ChannelNow(h http.Header, local time.Time) time.Time {
	if t, err := http.ParseTime(h.Get("Date")); err == nil {
		return t
	}
	return local
}

func isDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}
