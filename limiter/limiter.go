package limiter

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/paritysync/paritysync/models"
)

//go:embed acquire.lua
var acquireLua string

// script is the limiter's only code on the Redis side. redis.NewScript runs it with
// EVALSHA and falls back to EVAL when the server's script cache is cold.
var script = redis.NewScript(acquireLua)

// ErrUnknownChannel is returned for a channel the limiter was not configured with.
var ErrUnknownChannel = errors.New("unknown channel")

// ErrNoBudget is returned for an endpoint family that has no rate share on the channel.
var ErrNoBudget = errors.New("family has no rate budget")

// ErrInvalidRequest is returned for a request whose priority or cost is out of range,
// or that lacks the property a per-property channel needs.
var ErrInvalidRequest = errors.New("invalid limiter request")

// Tier is how much of a channel's daily quota is used.
type Tier string

// The quota tiers, by share of the daily quota used.
const (
	TierOK       Tier = "ok"
	TierWarn     Tier = "warn"     // ≥ 70 %
	TierPage     Tier = "page"     // ≥ 85 %
	TierThrottle Tier = "throttle" // ≥ 95 %: refill halves, priority ≥ 4 waits for midnight
	TierStop     Tier = "stop"     // 100 %: nothing until midnight
)

// Request asks for one channel request's worth of budget.
type Request struct {
	Channel string
	Family  models.Family
	// Property selects the bucket when the channel limits per property; ignored otherwise.
	Property string
	// Priority is 1 (urgent, may use the reserve) … 5 (bulk).
	Priority int
	// Cost is what the request takes from the daily quota (see ChannelConfig.Cost).
	Cost int
}

// Decision is the limiter's answer to one Request.
type Decision struct {
	Allowed bool
	// RetryAfter is how long to wait before asking again; zero when allowed.
	RetryAfter time.Duration
	// Remaining is the whole number of tokens left in the request's bucket.
	Remaining int
	// DailyUsed and DailyLimit are the channel's quota usage after the decision.
	DailyUsed, DailyLimit int
	// Tier is the quota tier after the decision. A request denied by the quota gets
	// the tier it would have reached instead — TierStop, or TierThrottle for
	// priority ≥ 4 — so that its wait until midnight is told apart from a token wait.
	Tier Tier
	// PausedReason is the operator's reason when the channel is paused.
	PausedReason string
}

// FamilyStatus is the state of one endpoint family's bucket.
type FamilyStatus struct {
	Family models.Family
	// Tokens is how many tokens the bucket holds now.
	Tokens float64
	Burst  int
	// RatePerMinute is the refill in effect now, after adaptive and throttle limits.
	RatePerMinute float64
}

// Status is a channel's limiter state, for operators.
type Status struct {
	Channel      string
	PausedReason string
	// PausedFor is what is left of a back-off written after a 429.
	PausedFor             time.Duration
	DailyUsed, DailyLimit int
	Tier                  Tier
	// QuotaResetsIn is the time to the next UTC midnight, by the Redis clock.
	QuotaResetsIn time.Duration
	// AdaptiveRate is the channel rate per minute derived from response headers, 0 if none.
	AdaptiveRate float64
	// AdaptiveFor is how long AdaptiveRate stays in force.
	AdaptiveFor time.Duration
	// Families lists the channel-wide buckets in models.Families order; empty for a
	// channel that limits per property, whose buckets are too many to list.
	Families []FamilyStatus
}

// Options tunes a Limiter; the zero value is usable.
type Options struct {
	// Prefix starts every key, "paritysync:" by default. It must not contain '{' or
	// '}', which would move the key's hash slot away from the channel's.
	Prefix string
	// PausePoll is the RetryAfter given while an operator pause holds, 5 s by default:
	// a pause has no end time, so workers re-check at this pace.
	PausePoll time.Duration
	// PauseTTL bounds an operator pause, 7 days by default, so a forgotten pause does
	// not outlive every key's TTL policy; Pause again to extend it.
	PauseTTL time.Duration
}

// Limiter is the distributed rate governor shared by every worker.
type Limiter struct {
	rdb       redis.Scripter
	channels  map[string]channelKeys
	pollMS    int64
	pauseTTLM int64
}

// channelKeys holds a channel's config and its fixed keys, built once so the hot path
// does not concatenate strings.
type channelKeys struct {
	cfg         models.ChannelConfig
	pause       string
	pausedUntil string
	daily       string
	adaptive    string
	buckets     map[models.Family]string
}

// New returns a Limiter over rdb for channels. Any client with scripting satisfies
// redis.Scripter: *redis.Client, *redis.ClusterClient, *redis.Ring.
func New(rdb redis.Scripter, channels []models.ChannelConfig, opts Options) *Limiter {
	if opts.Prefix == "" {
		opts.Prefix = "paritysync:"
	}
	if opts.PausePoll <= 0 {
		opts.PausePoll = 5 * time.Second
	}
	if opts.PauseTTL <= 0 {
		opts.PauseTTL = 7 * 24 * time.Hour
	}
	l := &Limiter{
		rdb:       rdb,
		channels:  make(map[string]channelKeys, len(channels)),
		pollMS:    opts.PausePoll.Milliseconds(),
		pauseTTLM: opts.PauseTTL.Milliseconds(),
	}
	for _, c := range channels {
		base := opts.Prefix + "{" + c.Slug + "}:"
		ck := channelKeys{
			cfg:         c,
			pause:       base + "pause",
			pausedUntil: base + "paused_until",
			daily:       base + "daily",
			adaptive:    base + "adaptive",
			buckets:     make(map[models.Family]string, len(models.Families)),
		}
		for _, f := range models.Families {
			ck.buckets[f] = base + "bucket:" + string(f)
		}
		l.channels[c.Slug] = ck
	}
	return l
}

func (l *Limiter) channel(slug string) (channelKeys, error) {
	ck, ok := l.channels[slug]
	if !ok {
		return channelKeys{}, ErrUnknownChannel
	}
	return ck, nil
}

// budget is the bucket a family of a channel draws from.
type budget struct {
	perMinute float64
	burst     int
	reserve   int
	share     float64
}

func familyBudget(c models.ChannelConfig, f models.Family) (budget, error) {
	share := float64(c.Shares.Of(f)) / 100
	perMinute, burst := c.FamilyBudget(f)
	if share <= 0 || perMinute <= 0 {
		return budget{}, fmt.Errorf("family %q: %w", f, ErrNoBudget)
	}
	// A reserve as deep as the bucket would starve every non-urgent request forever,
	// so at least one token stays open to everyone.
	reserve := min(c.Reserve(burst), burst-1)
	return budget{perMinute: perMinute, burst: burst, reserve: max(reserve, 0), share: share}, nil
}

// Acquire decides whether r may call its channel now. It consumes a token and r.Cost
// of the daily quota only when it allows; an error means no decision (fail closed).
func (l *Limiter) Acquire(ctx context.Context, r Request) (Decision, error) {
	ck, err := l.channel(r.Channel)
	if err != nil {
		return Decision{}, fmt.Errorf("acquire %s: %w", r.Channel, err)
	}
	if r.Priority < models.PriorityUrgent || r.Priority > models.PriorityBulk {
		return Decision{}, fmt.Errorf("acquire %s: priority %d: %w", r.Channel, r.Priority, ErrInvalidRequest)
	}
	if r.Cost < 1 {
		return Decision{}, fmt.Errorf("acquire %s: cost %d: %w", r.Channel, r.Cost, ErrInvalidRequest)
	}
	b, err := familyBudget(ck.cfg, r.Family)
	if err != nil {
		return Decision{}, fmt.Errorf("acquire %s: %w", r.Channel, err)
	}
	bucket := ck.buckets[r.Family]
	if ck.cfg.Scope == models.ScopeProperty {
		if r.Property == "" {
			return Decision{}, fmt.Errorf("acquire %s: no property on a per-property channel: %w", r.Channel, ErrInvalidRequest)
		}
		bucket += ":" + r.Property
	}
	res, err := script.Run(ctx, l.rdb,
		[]string{ck.pause, ck.pausedUntil, ck.daily, ck.adaptive, bucket},
		"acquire", r.Cost, ck.cfg.DailyQuota, r.Priority, b.perMinute, b.burst, b.reserve, b.share, l.pollMS,
	).Slice()
	if err != nil {
		return Decision{}, fmt.Errorf("acquire %s: %w", r.Channel, err)
	}
	d, err := parseDecision(res)
	if err != nil {
		return Decision{}, fmt.Errorf("acquire %s: %w", r.Channel, err)
	}
	return d, nil
}

func parseDecision(res []any) (Decision, error) {
	if len(res) != 7 {
		return Decision{}, fmt.Errorf("script reply has %d fields, want 7", len(res))
	}
	var n [5]int64
	for i := range n {
		v, ok := res[i].(int64)
		if !ok {
			return Decision{}, fmt.Errorf("script reply field %d is %T", i, res[i])
		}
		n[i] = v
	}
	tier, _ := res[5].(string)
	reason, _ := res[6].(string)
	return Decision{
		Allowed:      n[0] == 1,
		RetryAfter:   time.Duration(n[1]) * time.Millisecond,
		Remaining:    int(n[2]),
		DailyUsed:    int(n[3]),
		DailyLimit:   int(n[4]),
		Tier:         Tier(tier),
		PausedReason: reason,
	}, nil
}

// Backoff makes every worker wait wait from now (by the Redis clock) before calling
// channel again, as after a 429 with Retry-After. It never shortens a longer wait
// already in force.
func (l *Limiter) Backoff(ctx context.Context, channel string, wait time.Duration) error {
	ck, err := l.channel(channel)
	if err != nil {
		return fmt.Errorf("backoff %s: %w", channel, err)
	}
	if wait <= 0 {
		return nil
	}
	if err := script.Run(ctx, l.rdb, []string{ck.pausedUntil}, "backoff", ceilMS(wait)).Err(); err != nil {
		return fmt.Errorf("backoff %s: %w", channel, err)
	}
	return nil
}

// Adapt lowers channel's rate to 90 % of what the server reports in its rate-limit
// headers, for every worker, until the server's window resets. remaining < 0 means
// the server did not report it; then limit per resetAfter is used. With nothing
// remaining the channel waits for the reset. Without a usable resetAfter the headers
// say nothing about a rate and Adapt does nothing. On a per-property channel the rate
// applies to every property's buckets.
func (l *Limiter) Adapt(ctx context.Context, channel string, limit, remaining int, resetAfter time.Duration) error {
	ck, err := l.channel(channel)
	if err != nil {
		return fmt.Errorf("adapt %s: %w", channel, err)
	}
	if resetAfter <= 0 {
		return nil
	}
	left := remaining
	if limit > 0 && (left < 0 || left > limit) {
		left = limit
	}
	if left < 0 {
		return nil
	}
	// The estimate is good only until the server's window resets; a floor keeps a
	// sub-second reset from churning the key on every response.
	ttl := max(resetAfter, 2*time.Second)
	perMinute := 0.9 * float64(left) * float64(time.Minute) / float64(resetAfter)
	if err := script.Run(ctx, l.rdb, []string{ck.adaptive, ck.pausedUntil},
		"adapt", perMinute, ceilMS(ttl)).Err(); err != nil {
		return fmt.Errorf("adapt %s: %w", channel, err)
	}
	return nil
}

// Pause stops every worker from calling channel until Resume (or Options.PauseTTL).
func (l *Limiter) Pause(ctx context.Context, channel, reason string) error {
	ck, err := l.channel(channel)
	if err != nil {
		return fmt.Errorf("pause %s: %w", channel, err)
	}
	if reason == "" {
		// An empty reason would read as "not paused" in Decision.PausedReason.
		reason = "paused by operator"
	}
	if err := script.Run(ctx, l.rdb, []string{ck.pause}, "pause", reason, l.pauseTTLM).Err(); err != nil {
		return fmt.Errorf("pause %s: %w", channel, err)
	}
	return nil
}

// Resume lifts an operator pause and any back-off on channel.
func (l *Limiter) Resume(ctx context.Context, channel string) error {
	ck, err := l.channel(channel)
	if err != nil {
		return fmt.Errorf("resume %s: %w", channel, err)
	}
	if err := script.Run(ctx, l.rdb, []string{ck.pause, ck.pausedUntil}, "resume").Err(); err != nil {
		return fmt.Errorf("resume %s: %w", channel, err)
	}
	return nil
}

// Status reads channel's limiter state without changing it.
func (l *Limiter) Status(ctx context.Context, channel string) (Status, error) {
	ck, err := l.channel(channel)
	if err != nil {
		return Status{}, fmt.Errorf("status %s: %w", channel, err)
	}
	keys := []string{ck.pause, ck.pausedUntil, ck.daily, ck.adaptive}
	args := []any{"status", ck.cfg.DailyQuota}
	var fams []models.Family
	var budgets []budget
	if ck.cfg.Scope != models.ScopeProperty {
		for _, f := range models.Families {
			b, err := familyBudget(ck.cfg, f)
			if err != nil {
				continue // a family without a share has no bucket
			}
			fams = append(fams, f)
			budgets = append(budgets, b)
			keys = append(keys, ck.buckets[f])
			args = append(args, b.perMinute, b.burst, b.share)
		}
	}
	res, err := script.Run(ctx, l.rdb, keys, args...).Slice()
	if err != nil {
		return Status{}, fmt.Errorf("status %s: %w", channel, err)
	}
	if len(res) != 6+2*len(fams) {
		return Status{}, fmt.Errorf("status %s: script reply has %d fields", channel, len(res))
	}
	st := Status{Channel: channel, DailyLimit: ck.cfg.DailyQuota}
	st.PausedReason, _ = res[0].(string)
	st.PausedFor = msField(res[1])
	used, _ := res[2].(int64)
	st.DailyUsed = int(used)
	st.Tier = tierOf(st.DailyUsed, st.DailyLimit)
	st.QuotaResetsIn = msField(res[3])
	if s, _ := res[4].(string); s != "" {
		st.AdaptiveRate = floatField(s)
		st.AdaptiveFor = msField(res[5])
	}
	for i, f := range fams {
		tok, _ := res[6+2*i].(string)
		rate, _ := res[7+2*i].(string)
		st.Families = append(st.Families, FamilyStatus{
			Family: f, Tokens: floatField(tok), Burst: budgets[i].burst, RatePerMinute: floatField(rate),
		})
	}
	return st, nil
}

// tierOf mirrors tier() in acquire.lua for state read back by Status.
func tierOf(used, quota int) Tier {
	switch {
	case used >= quota:
		return TierStop
	case used*100 >= quota*95:
		return TierThrottle
	case used*100 >= quota*85:
		return TierPage
	case used*100 >= quota*70:
		return TierWarn
	}
	return TierOK
}

func msField(v any) time.Duration {
	n, _ := v.(int64)
	return time.Duration(n) * time.Millisecond
}

func floatField(s string) float64 {
	f, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	if err != nil {
		return 0
	}
	return f
}

// ceilMS rounds up so that a wait is never cut short by truncation.
func ceilMS(d time.Duration) int64 {
	return int64(math.Ceil(float64(d) / float64(time.Millisecond)))
}
