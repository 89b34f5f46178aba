// Package sim is a strict OTA channel: it enforces rate limits, daily quotas, bearer
// tokens and idempotency keys, stores the cells it is sent, and injects faults on
// demand. It is an http.Handler, so tests run it in-process under httptest and the
// otasim binary serves it.
package sim

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/paritysync/paritysync/models"
)

// Defaults applied by New to zero-valued Config fields.
const (
	DefaultTokenMaxAge    = time.Hour
	DefaultMaxBodyBytes   = 1 << 20
	DefaultIdempotencyTTL = 24 * time.Hour
	DefaultRatePerMinute  = 60
	DefaultHorizonDays    = 730
	DefaultMaxLogRecords  = 200000
)

// TokenPrefix starts every token the simulator issues; the rest is the issue time in
// unix seconds, so a test can mint an old token without a token endpoint.
const TokenPrefix = "simtoken-"

// Config is the simulator's whole configuration. The zero value serves
// models.DefaultChannels with no faults.
type Config struct {
	// Channels are the channels served, each at its BasePath ("/{slug}" when empty).
	// The fields used are Slug, Protocol, BasePath, RatePerMinute, Window (the
	// sliding window RatePerMinute counts in, as in the limiter: 60 s when zero),
	// Scope, DailyQuota, QuotaUnit, HorizonDays, MaxLinesPerRequest and Channex; a
	// zero DailyQuota or
	// MaxLinesPerRequest means unlimited. A channex channel's RatePerMinute is per
	// property and endpoint (10 by default, as Channex publishes), whatever its
	// Scope; the daily quota applies to the paritysync protocol only, as neither
	// Channex nor OpenTravel defines a quota answer.
	Channels []models.ChannelConfig `yaml:"channels" json:"channels"`
	// TokenMaxAge is how long after its issue time a simtoken-<unix> token is
	// accepted.
	TokenMaxAge time.Duration `yaml:"token_max_age" json:"token_max_age"`
	// StaticTokens never expire; they make curl and the demo easy.
	StaticTokens []string `yaml:"static_tokens" json:"-"`
	// MaxBodyBytes bounds a request body; larger bodies get 413.
	MaxBodyBytes int64 `yaml:"max_body_bytes" json:"max_body_bytes"`
	// IdempotencyTTL is how long a response is kept for replay under its key.
	IdempotencyTTL time.Duration `yaml:"idempotency_ttl" json:"idempotency_ttl"`
	// Faults are active from the start; POST /admin/faults replaces them.
	Faults Faults `yaml:"faults" json:"faults"`
	// MaxLogRecords bounds the per-request log that GET /requests serves; the
	// oldest records go first.
	MaxLogRecords int `yaml:"max_log_records" json:"max_log_records"`
	// Seed makes fault injection reproducible.
	Seed uint64 `yaml:"seed" json:"seed"`
	// Now is the simulator's clock; time.Now when nil. Tests inject a ManualClock's.
	Now func() time.Time `yaml:"-" json:"-"`
	// ClockOffset shifts the simulator's clock from Now: a channel whose clock is
	// behind (negative) or ahead of its clients'. Every answer's Date header, and
	// every time it announces, is on the shifted clock.
	ClockOffset time.Duration `yaml:"clock_offset" json:"clock_offset"`
	// RetryAfter is the form of every Retry-After: seconds, date (IMF-fixdate), or
	// alternate (the default: each in turn).
	RetryAfter string `yaml:"retry_after" json:"retry_after"`
}

// The forms of Config.RetryAfter.
const (
	RetryAfterAlternate = "alternate"
	RetryAfterSeconds   = "seconds"
	RetryAfterDate      = "date"
)

// Validate reports the first setting outside its range, by its yaml name.
func (c Config) Validate() error {
	switch c.RetryAfter {
	case "", RetryAfterAlternate, RetryAfterSeconds, RetryAfterDate:
	default:
		return fmt.Errorf("retry_after: must be alternate, seconds or date")
	}
	if err := c.Faults.Validate(); err != nil {
		return fmt.Errorf("faults: %w", err)
	}
	return nil
}

// Faults are the misbehaviours the simulator injects. Ratios are probabilities in
// [0, 1] drawn per request.
type Faults struct {
	// Channels limits the faults to these slugs; empty means every channel.
	Channels []string `yaml:"channels" json:"channels,omitempty"`
	// ErrorRatio answers 500/502/503/504 without applying anything.
	ErrorRatio float64 `yaml:"error_ratio" json:"error_ratio"`
	// LatencyMS delays every response.
	LatencyMS int `yaml:"latency_ms" json:"latency_ms"`
	// Hang holds every request until the client gives up or the simulator closes.
	Hang bool `yaml:"hang" json:"hang"`
	// StormSeconds answers every push with StormStatus for this many seconds from
	// the moment the faults are set.
	StormSeconds int `yaml:"storm_seconds" json:"storm_seconds"`
	// StormStatus is 429 (default) or 503; both carry Retry-After.
	StormStatus int `yaml:"storm_status" json:"storm_status,omitempty"`
	// StormFromFirstPush counts the storm's seconds from the first push it meets
	// (on a channel the faults apply to) instead of from the moment the faults are
	// set: a batch slow to reach the channel still meets the whole storm.
	StormFromFirstPush bool `yaml:"storm_from_first_push" json:"storm_from_first_push,omitempty"`
	// PartialRatio answers 207 with at least one failed line; failed lines are not
	// applied.
	PartialRatio float64 `yaml:"partial_ratio" json:"partial_ratio"`
	// CommitThen500Ratio applies the request and stores its response for replay,
	// then answers 500: the response is lost, the write is not.
	CommitThen500Ratio float64 `yaml:"commit_then_500_ratio" json:"commit_then_500_ratio"`
	// DriftRatio answers 200 without applying anything: silent drift that only
	// reconciliation finds.
	DriftRatio float64 `yaml:"drift_ratio" json:"drift_ratio"`
	// BadBodyRatio answers a push 200 with a body that confirms nothing, and
	// applies nothing: the page of a proxy or gateway in front of the channel.
	BadBodyRatio float64 `yaml:"bad_body_ratio" json:"bad_body_ratio"`
	// BadBody is the shape of those bodies: html (the default), empty, truncated
	// (the first half of a success answer) or error (the protocol's error shape:
	// {"error":"invalid",…}, Channex's {"errors":…}, OpenTravel's <Errors>).
	BadBody string `yaml:"bad_body" json:"bad_body,omitempty"`
	// ApplyDelayMS applies each admitted push this long after receiving it, as a
	// channel that queues its writes, and answers only once it has applied it: a
	// client whose timeout is shorter gives up first, and the push is applied all
	// the same. The late write is last-writer-wins, as on a real OTA: a version
	// older than the one the channel holds overwrites it (counted in
	// OlderApplied), so a client that sends a newer version before the older one
	// was applied loses it.
	ApplyDelayMS int `yaml:"apply_delay_ms" json:"apply_delay_ms"`
	// StormUntil is when the current storm ends; set by the simulator, ignored on
	// input.
	StormUntil *time.Time `yaml:"-" json:"storm_until,omitempty"`
}

// Validate reports the first out-of-range fault setting.
func (f Faults) Validate() error {
	ratios := []struct {
		name string
		v    float64
	}{
		{"error_ratio", f.ErrorRatio}, {"partial_ratio", f.PartialRatio},
		{"commit_then_500_ratio", f.CommitThen500Ratio}, {"drift_ratio", f.DriftRatio},
		{"bad_body_ratio", f.BadBodyRatio},
	}
	for _, r := range ratios {
		// The negated form also rejects NaN.
		if !(r.v >= 0 && r.v <= 1) {
			return fmt.Errorf("%s: must be in [0, 1]", r.name)
		}
	}
	switch {
	case f.LatencyMS < 0:
		return fmt.Errorf("latency_ms: must be >= 0")
	case f.ApplyDelayMS < 0 || f.ApplyDelayMS > maxApplyDelayMS:
		return fmt.Errorf("apply_delay_ms: must be in [0, %d]", maxApplyDelayMS)
	case f.StormSeconds < 0:
		return fmt.Errorf("storm_seconds: must be >= 0")
	case f.StormStatus != 0 && f.StormStatus != 429 && f.StormStatus != 503:
		return fmt.Errorf("storm_status: must be 429 or 503")
	case f.StormFromFirstPush && f.StormSeconds == 0:
		return fmt.Errorf("storm_from_first_push: needs storm_seconds > 0")
	case !slices.Contains(badBodies, f.BadBody):
		return fmt.Errorf("bad_body: must be one of %s", strings.Join(badBodies[1:], ", "))
	}
	return nil
}

// maxApplyDelayMS bounds Faults.ApplyDelayMS: ten minutes, the most a channel
// configuration may declare as its max_apply_delay.
const maxApplyDelayMS = 600_000

// The shapes of Faults.BadBody; "" is html.
const (
	BadBodyHTML      = "html"
	BadBodyEmpty     = "empty"
	BadBodyTruncated = "truncated"
	BadBodyError     = "error"
)

var badBodies = []string{"", BadBodyHTML, BadBodyEmpty, BadBodyTruncated, BadBodyError}

// appliesTo reports whether the faults target channel slug.
func (f Faults) appliesTo(slug string) bool {
	if len(f.Channels) == 0 {
		return true
	}
	for _, c := range f.Channels {
		if c == slug {
			return true
		}
	}
	return false
}

// IssueToken is a bearer token the simulator treats as issued at t.
func IssueToken(t time.Time) string { return fmt.Sprintf("%s%d", TokenPrefix, t.Unix()) }

// withDefaults fills zero fields so the rest of the simulator never checks for them.
func (c Config) withDefaults() Config {
	if len(c.Channels) == 0 {
		c.Channels = models.DefaultChannels()
	}
	chs := make([]models.ChannelConfig, len(c.Channels))
	for i, ch := range c.Channels {
		if ch.BasePath == "" {
			ch.BasePath = "/" + ch.Slug
		}
		if ch.Protocol == "" {
			ch.Protocol = models.ProtocolParitySync
		}
		if ch.RatePerMinute <= 0 {
			ch.RatePerMinute = DefaultRatePerMinute
			if ch.Protocol == models.ProtocolChannex {
				// Per property and endpoint, as Channex publishes it.
				ch.RatePerMinute = models.ChannexRequestsPerMinute
			}
		}
		ch.Window = ch.WindowLength()
		if ch.Scope == "" {
			ch.Scope = models.ScopeChannel
		}
		if ch.QuotaUnit == "" {
			ch.QuotaUnit = models.QuotaRequests
		}
		if ch.HorizonDays <= 0 {
			ch.HorizonDays = DefaultHorizonDays
		}
		chs[i] = ch
	}
	c.Channels = chs
	if c.MaxLogRecords <= 0 {
		c.MaxLogRecords = DefaultMaxLogRecords
	}
	if c.TokenMaxAge <= 0 {
		c.TokenMaxAge = DefaultTokenMaxAge
	}
	if c.MaxBodyBytes <= 0 {
		c.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if c.IdempotencyTTL <= 0 {
		c.IdempotencyTTL = DefaultIdempotencyTTL
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if off, now := c.ClockOffset, c.Now; off != 0 {
		c.Now = func() time.Time { return now().Add(off) }
	}
	return c
}
