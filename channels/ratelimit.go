package channels

import (
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// RateLimit is the budget a channel reported on a response.
type RateLimit struct {
	// Limit is the requests allowed per window.
	Limit int
	// Remaining is the requests left in the current window, -1 when the channel
	// did not say: the limiter then adapts to Limit alone instead of reading the
	// silence as "nothing left" and pausing the channel.
	Remaining int
	// Reset is how long until the budget is restored.
	Reset time.Duration
}

// epochThreshold separates a Reset given as delta-seconds from one given as a unix
// time: no window lasts 30 years, and no clock reads before 2001.
const epochThreshold = 1_000_000_000

// ParseRateLimit reads X-RateLimit-{Limit,Remaining,Reset}, falling back per field to
// the IETF RateLimit-{Limit,Remaining,Reset} headers and then to the combined
// `RateLimit: limit=.., remaining=.., reset=..` (or `r=..;t=..` with a
// `RateLimit-Policy: q=..`) form. Reset may be delta-seconds or a unix time. ok is
// false when neither Limit nor Remaining could be read.
func ParseRateLimit(h http.Header, now time.Time) (RateLimit, bool) {
	params := structuredParams(h.Values("RateLimit"))
	policy := structuredParams(h.Values("RateLimit-Policy"))
	pick := func(single []string, params map[string]string, keys ...string) (float64, bool) {
		for _, name := range single {
			if n, ok := leadingNumber(h.Get(name)); ok {
				return n, true
			}
		}
		for _, src := range []map[string]string{params, policy} {
			for _, k := range keys {
				if n, ok := leadingNumber(src[k]); ok {
					return n, true
				}
			}
		}
		return 0, false
	}
	var rl RateLimit
	limit, hasLimit := pick([]string{"X-RateLimit-Limit", "RateLimit-Limit"}, params, "limit", "q")
	remaining, hasRemaining := pick([]string{"X-RateLimit-Remaining", "RateLimit-Remaining"}, params, "remaining", "r")
	// The policy's q is a quota, never a reset; only RateLimit params give t.
	reset, hasReset := pick([]string{"X-RateLimit-Reset", "RateLimit-Reset"}, params, "reset", "t")
	if !hasLimit && !hasRemaining {
		return RateLimit{}, false
	}
	rl.Limit, rl.Remaining = clampInt(limit), clampInt(remaining)
	if !hasRemaining {
		rl.Remaining = -1
	}
	if hasReset {
		rl.Reset = resetDuration(reset, now)
	}
	return rl, true
}

// resetDuration turns a Reset value into a wait: unix seconds or milliseconds when
// large, delta-seconds otherwise.
func resetDuration(v float64, now time.Time) time.Duration {
	var d time.Duration
	switch {
	case v >= epochThreshold*1000:
		d = time.UnixMilli(int64(v)).Sub(now)
	case v >= epochThreshold:
		d = time.Unix(int64(v), 0).Sub(now)
	default:
		d = time.Duration(v * float64(time.Second))
	}
	return max(d, 0)
}

// structuredParams reads key=value members separated by commas or semicolons, the
// shape both RateLimit drafts use; quoted names like "default" are skipped.
func structuredParams(values []string) map[string]string {
	out := map[string]string{}
	for _, v := range values {
		for _, part := range strings.FieldsFunc(v, func(r rune) bool { return r == ',' || r == ';' }) {
			k, val, ok := strings.Cut(strings.TrimSpace(part), "=")
			if !ok {
				continue
			}
			k = strings.ToLower(strings.TrimSpace(k))
			if _, seen := out[k]; !seen {
				out[k] = strings.Trim(strings.TrimSpace(val), `"`)
			}
		}
	}
	return out
}

// leadingNumber reads the first number of a header value: "100, 100;w=60" is 100.
// Negative, non-finite and absurdly large values are not numbers here.
func leadingNumber(v string) (float64, bool) {
	v = strings.TrimSpace(v)
	if i := strings.IndexAny(v, ",; "); i >= 0 {
		v = v[:i]
	}
	if v == "" {
		return 0, false
	}
	n, err := strconv.ParseFloat(v, 64)
	if err != nil || math.IsNaN(n) || n < 0 || n > 1e15 {
		return 0, false
	}
	return n, true
}

func clampInt(f float64) int {
	if f > math.MaxInt32 {
		return math.MaxInt32
	}
	return int(f)
}
