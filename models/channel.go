package models

import (
	"fmt"
	"time"
)

// LimitScope says whether a channel counts its rate limit per channel or per property.
type LimitScope string

// Limit scopes.
const (
	ScopeChannel  LimitScope = "channel"
	ScopeProperty LimitScope = "property"
)

// QuotaUnit says what a channel's daily quota counts.
type QuotaUnit string

// Quota units.
const (
	QuotaRequests QuotaUnit = "requests"
	QuotaLines    QuotaUnit = "lines"
)

// FamilyShares weighs a channel's endpoint families, in percent, when they compete
// for the channel's one schedule (weights, not partitions); the three sum to 100.
type FamilyShares struct {
	Rates        int `yaml:"rates" json:"rates"`
	Availability int `yaml:"availability" json:"availability"`
	Restrictions int `yaml:"restrictions" json:"restrictions"`
}

// Of is the share of family f.
func (s FamilyShares) Of(f Family) int { return ByFamily[int](s).Of(f) }

// Largest is the family with the largest share (the first of Families on a tie):
// where work that belongs to no family, such as reading a channel back, counts.
func (s FamilyShares) Largest() Family {
	best := Families[0]
	for _, f := range Families[1:] {
		if s.Of(f) > s.Of(best) {
			best = f
		}
	}
	return best
}

// ChannelConfig is everything paritysync knows about one OTA channel: how to reach
// it, the protocol it speaks and its limits.
type ChannelConfig struct {
	Slug string `yaml:"slug" json:"slug"`
	// Protocol is the wire protocol; paritysync (the generic JSON one) by default.
	Protocol Protocol `yaml:"protocol" json:"protocol"`
	// BaseURL is where the channel lives, PARITYSYNC_CHANNEL_URL when empty.
	BaseURL string `yaml:"base_url" json:"base_url,omitempty"`
	// CredentialsFile holds the channel's secret (bearer token, API key, or
	// user:password for OpenTravel), re-read when it changes. Only the path is
	// configuration; the secret never leaves the worker's memory.
	CredentialsFile string `yaml:"credentials_file" json:"credentials_file,omitempty"`
	// ReadBack is true when reconciliation reads the channel's state back and diffs
	// it; false re-sends the acknowledged state on the schedule instead. A protocol
	// without a read-back (OpenTravel) must set it false.
	ReadBack bool `yaml:"read_back" json:"read_back"`
	// Channex maps room type and rate plan codes to Channex ids, per property;
	// required for protocol channex, refused otherwise.
	Channex ChannexMapping `yaml:"channex" json:"channex,omitzero"`
	// OpenTravel maps our codes to an OpenTravel channel's, per property: the
	// YAML's (opentravel.properties) seed them, and the codes stored over the API
	// (store.Mappings) win per property. Refused for another protocol.
	OpenTravel OpenTravelMapping `yaml:"opentravel" json:"opentravel,omitzero"`
	// BasePath is the path prefix of the channel's endpoints, "/{slug}" by default.
	BasePath string `yaml:"base_path" json:"base_path"`
	// RatePerMinute is the channel's published ceiling: at most this many requests
	// in any window of length Window (60 s on every real channel, hence the name).
	RatePerMinute int `yaml:"rate_per_minute" json:"rate_per_minute"`
	// Window is the length of the sliding window RatePerMinute counts in: 60 s
	// (DefaultWindow) unless the channel declares another, as tests with a short
	// window do; zero means DefaultWindow. See WindowLength.
	Window time.Duration `yaml:"window" json:"window"`
	// Burst is how many requests may go back to back before the limiter's pace
	// (one per (window + margin) / RatePerMinute) holds; bulk work never takes it.
	Burst  int          `yaml:"burst" json:"burst"`
	Shares FamilyShares `yaml:"shares" json:"shares"`
	Scope  LimitScope   `yaml:"scope" json:"scope"`
	// DailyQuota is the channel's daily budget in QuotaUnit, reset at UTC midnight.
	DailyQuota         int       `yaml:"daily_quota" json:"daily_quota"`
	QuotaUnit          QuotaUnit `yaml:"quota_unit" json:"quota_unit"`
	HorizonDays        int       `yaml:"horizon_days" json:"horizon_days"`
	MaxLinesPerRequest int       `yaml:"max_lines_per_request" json:"max_lines_per_request"`
	// MaxRetryAfter caps how long a Retry-After or a denied token may make us wait.
	MaxRetryAfter time.Duration `yaml:"max_retry_after" json:"max_retry_after"`
	// BreakerFailures is how many 5xx answers or timeouts in a row open the
	// channel's circuit breaker; BreakerCooldown how long it stays open before one
	// probe request may test the channel.
	BreakerFailures int           `yaml:"breaker_failures" json:"breaker_failures"`
	BreakerCooldown time.Duration `yaml:"breaker_cooldown" json:"breaker_cooldown"`
	// MaxApplyDelay is how long after receiving a push the channel may still apply
	// it. The nights of a push whose answer never came (a timeout, a 5xx) stay
	// leased for the HTTP timeout plus this long, so a newer version is never sent
	// while the channel may still apply an older one after it.
	MaxApplyDelay time.Duration `yaml:"max_apply_delay" json:"max_apply_delay"`
}

// WindowOf names the rate-limit window family f counts in on a channel that limits
// per property: the family, or the endpoint it shares with others (Channex takes
// prices and restrictions at one endpoint, under one limit).
func (c ChannelConfig) WindowOf(f Family) string {
	if c.Protocol == ProtocolChannex {
		return ChannexEndpoint(f)
	}
	return string(f)
}

// WindowLength is the channel's window in force: Window, or DefaultWindow when a
// config built without the house defaults leaves it zero.
func (c ChannelConfig) WindowLength() time.Duration {
	if c.Window <= 0 {
		return DefaultWindow
	}
	return c.Window
}

// Cost is what request r takes from the daily quota.
func (c ChannelConfig) Cost(r ChannelRequest) int {
	if c.QuotaUnit == QuotaLines {
		return r.Cost()
	}
	return 1
}

// Validate reports the first inconsistency in c, naming the field and the rule.
func (c ChannelConfig) Validate() error {
	if err := c.validateLimits(); err != nil {
		return err
	}
	return c.validateProtocol()
}

func (c ChannelConfig) validateLimits() error {
	switch {
	case c.Slug == "":
		return fmt.Errorf("channel: slug is required")
	case c.RatePerMinute <= 0:
		return fmt.Errorf("channel %s: rate_per_minute must be > 0", c.Slug)
	case c.Window <= 0 || c.Window > MaxWindow:
		return fmt.Errorf("channel %s: window must be > 0 and <= %s", c.Slug, MaxWindow)
	case c.Burst < 1 || c.Burst >= c.RatePerMinute:
		return fmt.Errorf("channel %s: burst must be in 1..rate_per_minute-1", c.Slug)
	case c.Shares.Rates+c.Shares.Availability+c.Shares.Restrictions != 100:
		return fmt.Errorf("channel %s: shares must sum to 100", c.Slug)
	case c.Scope != ScopeChannel && c.Scope != ScopeProperty:
		return fmt.Errorf("channel %s: scope must be channel or property", c.Slug)
	case c.DailyQuota <= 0:
		return fmt.Errorf("channel %s: daily_quota must be > 0", c.Slug)
	case c.QuotaUnit != QuotaRequests && c.QuotaUnit != QuotaLines:
		return fmt.Errorf("channel %s: quota_unit must be requests or lines", c.Slug)
	case c.HorizonDays <= 0:
		return fmt.Errorf("channel %s: horizon_days must be > 0", c.Slug)
	case c.MaxLinesPerRequest <= 0:
		return fmt.Errorf("channel %s: max_lines_per_request must be > 0", c.Slug)
	case c.MaxRetryAfter <= 0:
		return fmt.Errorf("channel %s: max_retry_after must be > 0", c.Slug)
	case c.BreakerFailures < 1:
		return fmt.Errorf("channel %s: breaker_failures must be >= 1", c.Slug)
	case c.BreakerCooldown <= 0:
		return fmt.Errorf("channel %s: breaker_cooldown must be > 0", c.Slug)
	case c.MaxApplyDelay < 0 || c.MaxApplyDelay > MaxApplyDelayLimit:
		return fmt.Errorf("channel %s: max_apply_delay must be >= 0 and <= %s", c.Slug, MaxApplyDelayLimit)
	}
	return nil
}

// Circuit breaker defaults: 5 failures in a row open it for 30 s.
const (
	DefaultBreakerFailures = 5
	DefaultBreakerCooldown = 30 * time.Second
)

// DefaultMaxApplyDelay is the apply delay assumed of a channel that declares none:
// channels have been seen applying a push 13 s after receiving it. A channel may
// declare at most MaxApplyDelayLimit, beyond which its nights would stay leased
// longer than a push activity is worth waiting for.
const (
	DefaultMaxApplyDelay = 15 * time.Second
	MaxApplyDelayLimit   = 10 * time.Minute
)

// DefaultWindow is the window every real channel counts its limit in; MaxWindow the
// longest a channel may declare, beyond which a day's quota is the better tool.
const (
	DefaultWindow = time.Minute
	MaxWindow     = time.Hour
)

// DefaultRatePerMinute is the ceiling of a channel added by configuration without
// one: the most conservative of the channels we know.
const DefaultRatePerMinute = 60

// NewChannelConfig is a channel with the house defaults for everything but its slug
// and ceiling; the burst is a tenth of the ceiling so a burst never dominates it.
func NewChannelConfig(slug string, perMinute int) ChannelConfig {
	return ChannelConfig{
		Slug: slug, Protocol: ProtocolParitySync, ReadBack: true,
		BasePath: "/" + slug, RatePerMinute: perMinute, Window: DefaultWindow, Burst: max(2, perMinute/10),
		Shares: FamilyShares{Rates: 50, Availability: 30, Restrictions: 20},
		Scope:  ScopeChannel, DailyQuota: 50000, QuotaUnit: QuotaRequests,
		HorizonDays: 730, MaxLinesPerRequest: 100, MaxRetryAfter: 5 * time.Minute,
		BreakerFailures: DefaultBreakerFailures, BreakerCooldown: DefaultBreakerCooldown,
		MaxApplyDelay: DefaultMaxApplyDelay,
	}
}

// DefaultChannels are the channels paritysync knows out of the box.
func DefaultChannels() []ChannelConfig {
	return []ChannelConfig{
		NewChannelConfig("booking_com", 90),
		NewChannelConfig("expedia", 60),
		NewChannelConfig("agoda", 120),
	}
}

// ChannelMap indexes channels by slug; a later entry with the same slug wins.
func ChannelMap(channels []ChannelConfig) map[string]ChannelConfig {
	m := make(map[string]ChannelConfig, len(channels))
	for _, c := range channels {
		m[c.Slug] = c
	}
	return m
}
