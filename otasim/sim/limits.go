package sim

import (
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/paritysync/paritysync/models"
)

// limitKey is the sliding-window key of a push: the property for property-scoped
// channels, otherwise the whole channel.
func (ch *channel) limitKey(property string) string {
	if ch.cfg.Scope == models.ScopeProperty {
		return property
	}
	return ""
}

// window is the sliding window of key in m, as long as the channel's.
func (ch *channel) window(m map[string]*window, key string) *window {
	w := m[key]
	if w == nil {
		w = &window{length: ch.cfg.Window}
		m[key] = w
	}
	return w
}

// rateHeaders sets X-RateLimit-*: Reset is the seconds until the window of key is
// empty again, so Remaining/Reset never overstates the safe rate.
func (ch *channel) rateHeaders(key string, now time.Time, h http.Header) {
	limit := ch.cfg.RatePerMinute
	used, reset := 0, time.Duration(0)
	if w := ch.windows[key]; w != nil {
		used, reset = w.count(now), w.clear(now)
	}
	h.Set(models.HeaderRateLimitLimit, strconv.Itoa(limit))
	h.Set(models.HeaderRateLimitRemaining, strconv.Itoa(max(0, limit-used)))
	h.Set(models.HeaderRateLimitReset, strconv.FormatInt(ceilSeconds(reset), 10))
}

// throttle is a 429 or 503 with Retry-After for the limit key: delta-seconds, an
// IMF-fixdate on the simulator's clock, or (by default) each in turn, so clients
// are exercised on both forms. The time it announces is kept, to count calls that
// come before it.
func (ch *channel) throttle(key string, status int, wait time.Duration, now time.Time) reply {
	secs := max(1, ceilSeconds(wait))
	rep := errorReply(status, models.ErrorRateLimited, fmt.Sprintf("retry in %d s", secs))
	ch.throttles++
	at := now.Add(time.Duration(secs) * time.Second)
	if ch.retryAfter == RetryAfterSeconds || ch.retryAfter != RetryAfterDate && ch.throttles%2 == 1 {
		rep.header.Set(models.HeaderRetryAfter, strconv.FormatInt(secs, 10))
	} else {
		// Whole seconds after now, rounded up, so the date is never early.
		at = now.Truncate(time.Second).Add(time.Duration(secs) * time.Second)
		if !now.Truncate(time.Second).Equal(now) {
			at = at.Add(time.Second)
		}
		rep.header.Set(models.HeaderRetryAfter, at.UTC().Format(http.TimeFormat))
	}
	if at.After(ch.announced[key]) {
		ch.announced[key] = at
	}
	return rep
}

// arrive counts a valid push or read of key: in the arrivals window, and as early
// when it comes before the time a Retry-After announced for key.
func (ch *channel) arrive(key string, now time.Time) {
	ch.stats.MaxWindowRequests = max(ch.stats.MaxWindowRequests, ch.window(ch.arrivals, key).add(now))
	if now.Before(ch.announced[key]) {
		ch.stats.EarlyArrivals++
	}
}

func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}

// rollQuota starts a new quota day at UTC midnight.
func (ch *channel) rollQuota(now time.Time) {
	if day := models.DateOf(now); day != ch.quotaDay {
		ch.quotaDay, ch.stats.DailyUsed = day, 0
	}
}
