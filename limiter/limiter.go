package limiter

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/paritysync/paritysync/models"
)

// The limiter's code on the Redis side: one script per operation (lua/), each the
// shared prelude, the ordering gate's helpers where it reads the gate, and its own
// file, so that each is whole for EVALSHA. redis.NewScript runs a script with EVALSHA
// and falls back to EVAL when the server's script cache is cold. The decision itself,
// reserve, is a function of a library instead (library.go).
var (
	//go:embed lua/prelude.lua
	preludeLua string
	//go:embed lua/gate.lua
	gateLua string
	//go:embed lua
	luaFS embed.FS

	releaseScript    = newScript("release.lua", false)
	outcomeScript    = newScript("outcome.lua", false)
	backoffScript    = newScript("backoff.lua", false)
	adaptScript      = newScript("adapt.lua", false)
	pauseScript      = newScript("pause.lua", false)
	resumeScript     = newScript("resume.lua", false)
	statusScript     = newScript("status.lua", false)
	backoffsOfScript = newScript("backoffs_of.lua", false)
	gateLoadScript   = newScript("gate_load.lua", true)
	gateMarkScript   = newScript("gate_mark.lua", false)
	budgetScript     = newScript("budget.lua", false)
	gateEpochScript  = newScript("gate_epoch.lua", false)
)

// scripts holds every script by its SHA1, for a pipeline that loads them after a
// restart of Redis and finds a recorded call's script again (pipeline.go).
var scripts = map[string]*redis.Script{}

// newScript is the operation in lua/name, after the prelude and, with gate, the gate.
func newScript(name string, gate bool) *redis.Script {
	own, err := luaFS.ReadFile("lua/" + name)
	if err != nil {
		panic(err)
	}
	src := preludeLua
	if gate {
		src += gateLua
	}
	// A script reads the clock first (prelude's clock).
	s := redis.NewScript(src + "clock()\n" + string(own))
	scripts[s.Hash()] = s
	return s
}

// ErrUnknownChannel is returned for a channel the limiter was not configured with.
var ErrUnknownChannel = errors.New("unknown channel")

// ErrNoBudget is returned for an endpoint family that has no weight on the channel.
var ErrNoBudget = errors.New("family has no rate budget")

// ErrInvalidRequest is returned for a request whose priority or cost is out of range,
// that lacks an id, or that lacks the property a per-property channel needs.
var ErrInvalidRequest = errors.New("invalid limiter request")

// Tier is how much of a channel's daily quota is used.
type Tier string

// The quota tiers, by share of the daily quota used.
const (
	TierOK       Tier = "ok"
	TierWarn     Tier = "warn"     // ≥ 70 %
	TierPage     Tier = "page"     // ≥ 85 %
	TierThrottle Tier = "throttle" // ≥ 95 %: the limit halves, priority ≥ 4 waits for midnight
	TierStop     Tier = "stop"     // 100 %: nothing until midnight
)

// State is what a Decision tells the caller to do.
type State string

// Decision states.
const (
	// Send: the slot is due and the request may go now, without the Dropped nights.
	// The slot is spent, the quota charged and the kept nights leased until Release.
	Send State = "send"
	// Wait: the request holds a slot Wait from now; ask again with the same id then.
	Wait State = "wait"
	// Superseded: every night of the request was already sent with a newer version.
	// Nothing is to be sent and nothing was spent.
	Superseded State = "superseded"
	// Blocked: another request carrying some of the same nights is in flight; ask
	// again after Wait. The slot was given back, and the pace with it.
	Blocked State = "blocked"
	// Paused: an operator paused the channel (PausedReason); ask again after Wait.
	Paused State = "paused"
	// Backoff: the channel asked every worker to hold back (a 429's Retry-After, or
	// rate-limit headers reporting nothing left); ask again after Wait.
	Backoff State = "backoff"
	// Quota: the daily quota cannot take the request before it resets, Wait from now.
	Quota State = "quota"
	// Breaker: the channel's circuit breaker is open (or a probe is testing it);
	// ask again after Wait.
	Breaker State = "breaker"
)

// Breaker states.
const (
	BreakerClosed = "closed"
	BreakerOpen   = "open"
	BreakerHalf   = "half-open"
)

// Request asks for one channel request's slot.
type Request struct {
	Channel string
	Family  models.Family
	// Property selects the window when the channel limits per property, and is the
	// request's turn group (with the family) otherwise.
	Property string
	// Priority is 1 (urgent) … 5 (bulk).
	Priority int
	// Cost is what the request takes from the daily quota (see ChannelConfig.Cost).
	Cost int
	// ID names the reservation; the same id asks again for the slot it holds. It is
	// stable across retries of one request and unique among requests.
	ID string
	// Lines are the request's lines, for the ordering gate; without lines the gate
	// is not consulted.
	Lines []models.ARILine
	// Hold reserves the slot without sending even when it is due: the answer is
	// Wait (zero when due), and the next Reserve with the same id sends. A lane
	// reserves its next request's slot this way while it finishes the current one.
	Hold bool
}

// Decision is the limiter's answer to one Request.
type Decision struct {
	State State
	// Wait is how long until the held slot, the end of a pause or back-off, or the
	// quota reset; zero for Send and Superseded.
	Wait time.Duration
	// Remaining is how many more slots the window has room for now.
	Remaining int
	// DailyUsed and DailyLimit are the channel's quota usage after the decision.
	DailyUsed, DailyLimit int
	// Tier is the quota tier after the decision; a request refused by the quota gets
	// the tier it would have reached (TierStop, or TierThrottle for priority ≥ 4).
	Tier Tier
	// PausedReason is the operator's reason when the channel is paused.
	PausedReason string
	// Dropped are the nights the ordering gate dropped (Send, Superseded).
	Dropped []models.LineNight
	// FamilyStopped is true for a Quota answer given because the channel stopped
	// the request's family (StopFamily), not because the daily quota is spent.
	FamilyStopped bool
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
	// Foreign is how many requests per window the channel's headers say others use
	// of its budget; ForeignFor is how long that estimate stays in force.
	Foreign    int
	ForeignFor time.Duration
	// Limit is the window's capacity in force: the declared limit less Foreign,
	// halved in the throttle tier. Zero for a per-property channel.
	Limit int
	// InWindow is how many slots the current window holds; Ahead how many future
	// slots are reserved; NextSlotIn how long until the next slot the pace allows.
	// Zero for a per-property channel, whose windows are too many to list.
	InWindow, Ahead int
	NextSlotIn      time.Duration
	// Breaker is the circuit breaker's state, BreakerOpenFor what is left of its
	// cool-down, and Failures the current streak of 5xx answers and timeouts.
	Breaker        string
	BreakerOpenFor time.Duration
	Failures       int
	// Stopped are the families the channel stopped with quota_exhausted
	// (StopFamily), in models.Families order.
	Stopped []FamilyStop
	// BackedOff is how many of a per-property channel's windows (a property's
	// family, or the endpoint it shares) a 429 backed off (BackoffScope) and are
	// still held; Backoffs lists those that end last, at most StatusBackoffs.
	BackedOff int
	Backoffs  []ScopeBackoff
}

// StatusBackoffs is how many of a channel's per-property back-offs Status lists.
const StatusBackoffs = 20

// ScopeBackoff is one property's window backed off on a per-property channel, and
// what is left of it.
type ScopeBackoff struct {
	Property string
	// Window is the family, or the endpoint the family shares (ChannelConfig.WindowOf).
	Window string
	For    time.Duration
}

// Scope names a request's window for BackoffsOf: a property's family.
type Scope struct {
	Property string
	Family   models.Family
}

// FamilyStop is one family stopped on a channel, and what is left of the stop.
type FamilyStop struct {
	Family models.Family
	For    time.Duration
}

// Options tunes a Limiter; the zero value is usable.
type Options struct {
	// Prefix starts every key, "paritysync:" by default. It must not contain '{' or
	// '}', which would move the key's hash slot away from the channel's.
	Prefix string
	// PausePoll is the Wait given while an operator pause holds, 30 min by default:
	// a pause has no end time, and a resume also reaches running work by signal.
	PausePoll time.Duration
	// PauseTTL bounds an operator pause, 7 days by default, so a forgotten pause does
	// not outlive every key's TTL policy; Pause again to extend it.
	PauseTTL time.Duration
	// Margin widens the window the limiter counts in beyond the channel's own
	// (ChannelConfig.Window, 60 s on every real channel), 500 ms by default, so a
	// request sent a little after its slot (dispatch and network lateness) never
	// lands in a window that is already full. A holder later than Margin gets a new
	// slot. It is absolute time, not a share of the window: a short window pays it
	// as a larger share of its throughput.
	Margin time.Duration
	// Lease is the HTTP timeout plus a little; 30 s by default. A sent request's
	// nights stay leased for Lease plus its channel's MaxApplyDelay unless Release
	// comes first: that bounds a worker that died mid-request, and it is how long a
	// push whose answer never came (released by no one) keeps its nights, so the
	// channel has applied it, if ever, before a newer version goes out.
	Lease time.Duration
	// MaxAge is how long a waiting request may be moved back by more urgent work or
	// other properties' turns; 10 min by default.
	MaxAge time.Duration
	// GateTTL is how long the ordering gate remembers the versions sent per night
	// after the last request to that property and family; 30 days by default.
	GateTTL time.Duration
	// Zones gives each property's today: the gate forgets the nights before it. The
	// zero value puts every property in UTC.
	Zones models.PropertyZones
}

// Limiter is the distributed rate governor shared by every worker.
type Limiter struct {
	rdb      Client
	channels map[string]channelKeys
	prefix   string
	opts     Options
	// now is the clock that dates the gate's cutoff (time.Now; tests move it).
	now func() time.Time
}

// channelKeys holds a channel's config and its fixed keys, built once so the hot path
// does not concatenate more strings than it must.
type channelKeys struct {
	cfg         models.ChannelConfig
	base        string
	pause       string
	pausedUntil string
	daily       string
	res         string
	breaker     string
	backoffs    string
}

// New returns a Limiter over rdb for channels (see Client).
func New(rdb Client, channels []models.ChannelConfig, opts Options) *Limiter {
	if opts.Prefix == "" {
		opts.Prefix = "paritysync:"
	}
	if opts.PausePoll <= 0 {
		opts.PausePoll = 30 * time.Minute
	}
	if opts.PauseTTL <= 0 {
		opts.PauseTTL = 7 * 24 * time.Hour
	}
	if opts.Margin <= 0 {
		opts.Margin = 500 * time.Millisecond
	}
	if opts.Lease <= 0 {
		opts.Lease = 30 * time.Second
	}
	if opts.MaxAge <= 0 {
		opts.MaxAge = 10 * time.Minute
	}
	if opts.GateTTL <= 0 {
		opts.GateTTL = 30 * 24 * time.Hour
	}
	l := &Limiter{rdb: rdb, channels: make(map[string]channelKeys, len(channels)), prefix: opts.Prefix, opts: opts,
		now: time.Now}
	for _, c := range channels {
		base := opts.Prefix + "{" + c.Slug + "}:"
		l.channels[c.Slug] = channelKeys{
			cfg: c, base: base, pause: base + "pause", pausedUntil: base + "paused_until",
			daily: base + "daily", res: base + "res", breaker: base + "breaker", backoffs: base + "backoffs",
		}
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

// quotaStop is the key of family f's stop after the channel answered quota_exhausted.
func (ck channelKeys) quotaStop(f models.Family) string { return ck.base + "quota_stop:" + string(f) }

// scope names the window a request counts in: the whole channel, or one property's
// family (or the endpoint it shares, see ChannelConfig.WindowOf) on a channel that
// limits per property.
func (ck channelKeys) scope(property string, f models.Family) string {
	if ck.cfg.Scope == models.ScopeProperty {
		return property + ":" + ck.cfg.WindowOf(f)
	}
	return "all"
}

// Reserve decides when r may call its channel, in one atomic step: the channel's
// pause and back-off, the daily quota, a slot in the channel's window (held for r.ID
// until it is due, so a request costs one decision and at most one wait), and, once
// the slot is due, the ordering gate. It spends a slot and the quota only when it
// answers Send. An error means no decision (fail closed).
func (l *Limiter) Reserve(ctx context.Context, r Request) (Decision, error) {
	keys, args, err := l.reserveCall(r)
	if err != nil {
		return Decision{}, fmt.Errorf("reserve %s: %w", r.Channel, err)
	}
	res, err := l.fcall(ctx, reserveFunc, keys, args...).Slice()
	if err != nil {
		return Decision{}, fmt.Errorf("reserve %s: %w", r.Channel, err)
	}
	d, err := parseDecision(res)
	if err != nil {
		return Decision{}, fmt.Errorf("reserve %s: %w", r.Channel, err)
	}
	if runs := gateRuns(r.Lines); len(runs) != len(r.Lines) {
		// The gate answered by run; the caller drops nights by line.
		for i := range d.Dropped {
			d.Dropped[i].Line = runs[d.Dropped[i].Line].line
		}
	}
	return d, nil
}

// gateRun is a run of consecutive nights a line sets, as the ordering gate takes it.
type gateRun struct {
	line     int
	from, to models.Date
}

// gateRuns are the runs of nights lines set: one per line, or one per run of
// its days for a line with Days (the weekends of a season), so that the gate
// records and leases only the nights the line sets.
func gateRuns(lines []models.ARILine) []gateRun {
	out := make([]gateRun, 0, len(lines))
	for i, l := range lines {
		if l.Days.IsZero() {
			out = append(out, gateRun{line: i, from: l.From, to: l.To})
			continue
		}
		start := -1
		for d := l.From; !d.After(l.To); d = d.AddDays(1) {
			switch {
			case !l.Covers(d):
				start = -1
			case start < 0:
				start = len(out)
				out = append(out, gateRun{line: i, from: d, to: d})
			default:
				out[start].to = d
			}
		}
	}
	return out
}

// reserveCall checks r and builds the reserve script's KEYS and ARGV.
func (l *Limiter) reserveCall(r Request) (keys []string, args []any, err error) {
	ck, err := l.channel(r.Channel)
	if err != nil {
		return nil, nil, err
	}
	switch {
	case r.Priority < models.PriorityUrgent || r.Priority > models.PriorityBulk:
		return nil, nil, fmt.Errorf("priority %d: %w", r.Priority, ErrInvalidRequest)
	case r.Cost < 1:
		return nil, nil, fmt.Errorf("cost %d: %w", r.Cost, ErrInvalidRequest)
	case r.ID == "":
		return nil, nil, fmt.Errorf("no id: %w", ErrInvalidRequest)
	case ck.cfg.Scope == models.ScopeProperty && r.Property == "":
		return nil, nil, fmt.Errorf("no property on a per-property channel: %w", ErrInvalidRequest)
	}
	for i, ln := range r.Lines {
		if ln.Version < 1 {
			return nil, nil, fmt.Errorf("line %d: version %d must be >= 1: %w", i, ln.Version, ErrInvalidRequest)
		}
	}
	weight := ck.cfg.Shares.Of(r.Family)
	if weight <= 0 {
		return nil, nil, fmt.Errorf("family %q: %w", r.Family, ErrNoBudget)
	}
	scope := ck.scope(r.Property, r.Family)
	gateScope := r.Property + ":" + string(r.Family)
	keys = []string{ck.pause, ck.pausedUntil, ck.daily, ck.base + "adaptive:" + scope,
		ck.base + "sched:" + scope, ck.base + "tat:" + scope, ck.res,
		ck.base + "gate:" + gateScope, ck.base + "lease:" + gateScope, ck.breaker,
		ck.base + "index4:" + scope, ck.base + "turn4:" + scope,
		ck.base + "paused_until:" + scope, ck.base + "budget", ck.quotaStop(r.Family), ck.base + "budget_renewed",
		ck.base + "alive:" + scope}
	hold := 0
	if r.Hold {
		hold = 1
	}
	// A channel limited as a whole has one scope, whose mark also speaks for res.
	whole := 0
	if ck.cfg.Scope != models.ScopeProperty {
		whole = 1
	}
	runs := gateRuns(r.Lines)
	args = make([]any, 0, 19+4*len(runs))
	args = append(args, r.ID, r.Priority, r.Cost, ck.cfg.DailyQuota, ck.cfg.RatePerMinute, ck.cfg.Burst,
		l.opts.Margin.Milliseconds(), l.opts.PausePoll.Milliseconds(), l.lease(ck.cfg).Milliseconds(),
		l.opts.MaxAge.Milliseconds(), r.Property+"|"+string(r.Family), weight, l.opts.GateTTL.Milliseconds(), len(runs), hold,
		ck.cfg.WindowLength().Milliseconds(), l.cutoff(r.Property), whole)
	for _, g := range runs {
		ln := r.Lines[g.line]
		args = append(args, ln.RoomTypeCode+"|"+ln.RatePlanCode, dayNumber(g.from), dayNumber(g.to), ln.Version)
	}
	return keys, args, nil
}

// lease is how long a Send leases its nights on channel c: the HTTP timeout and then
// the longest the channel may take to apply what it received.
func (l *Limiter) lease(c models.ChannelConfig) time.Duration {
	return l.opts.Lease + max(0, c.MaxApplyDelay)
}

// cutoff is the first night the gate keeps for property: its today, as a day number.
func (l *Limiter) cutoff(property string) int64 {
	return dayNumber(l.opts.Zones.Today(property, l.now()))
}

func parseDecision(res []any) (Decision, error) {
	if len(res) < 7 || (len(res)-7)%3 != 0 {
		return Decision{}, fmt.Errorf("script reply has %d fields", len(res))
	}
	state, _ := res[0].(string)
	var n [4]int64
	for i := range n {
		v, ok := res[i+1].(int64)
		if !ok {
			return Decision{}, fmt.Errorf("script reply field %d is %T", i+1, res[i+1])
		}
		n[i] = v
	}
	tier, _ := res[5].(string)
	reason, _ := res[6].(string)
	d := Decision{
		State: State(state), Wait: time.Duration(n[0]) * time.Millisecond, Remaining: int(n[1]),
		DailyUsed: int(n[2]), DailyLimit: int(n[3]), Tier: Tier(tier), PausedReason: reason,
	}
	if d.State == Quota {
		d.FamilyStopped, d.PausedReason = reason == "family", ""
	}
	// The gate answers ranges (line, first day, last day); a Decision lists nights.
	for i := 7; i+2 < len(res); i += 3 {
		line, _ := res[i].(int64)
		from, _ := res[i+1].(int64)
		to, _ := res[i+2].(int64)
		for dn := from; dn <= to; dn++ {
			d.Dropped = append(d.Dropped, models.LineNight{Line: int(line), Date: dateOfNumber(dn)})
		}
	}
	return d, nil
}

// Release ends the lease a Send took on r's nights: call it once the channel's answer
// is known (it applied the request or refused it), so the next request touching them
// may go. A request whose answer never came must not be released: the channel may
// still apply it, and its lease (Options.Lease) outlasts that. The answer to a
// re-send settles the re-send only: an earlier attempt of r that went unanswered
// keeps the nights until its own lease ends.
func (l *Limiter) Release(ctx context.Context, r Request) error {
	ck, err := l.channel(r.Channel)
	if err != nil {
		return fmt.Errorf("release %s: %w", r.Channel, err)
	}
	key := ck.base + "lease:" + r.Property + ":" + string(r.Family)
	if err := releaseScript.Run(ctx, l.rdb, []string{key}, r.ID).Err(); err != nil {
		return fmt.Errorf("release %s: %w", r.Channel, err)
	}
	return nil
}

// Outcome feeds channel's circuit breaker with what a push came to: ok false for a
// 5xx answer or a timeout, true for any answer that shows the channel up. It returns
// the breaker's state and whether this outcome changed it (opened or closed it).
func (l *Limiter) Outcome(ctx context.Context, channel string, ok bool) (string, bool, error) {
	ck, err := l.channel(channel)
	if err != nil {
		return "", false, fmt.Errorf("outcome %s: %w", channel, err)
	}
	flag := 0
	if ok {
		flag = 1
	}
	res, err := outcomeScript.Run(ctx, l.rdb, []string{ck.breaker}, flag, ck.cfg.BreakerFailures,
		ck.cfg.BreakerCooldown.Milliseconds()).Slice()
	if err != nil {
		return "", false, fmt.Errorf("outcome %s: %w", channel, err)
	}
	if len(res) != 2 {
		return "", false, fmt.Errorf("outcome %s: script reply has %d fields", channel, len(res))
	}
	st, _ := res[0].(string)
	if st == "half" {
		st = BreakerHalf
	}
	return st, intField(res[1]) == 1, nil
}

// Backoff makes every worker wait wait from now (by the Redis clock) before calling
// channel again, as after a 429 with Retry-After. It never shortens a longer wait
// already in force. When it ends, the channel's pace restarts without a burst, so
// the requests that waited leave one interval apart.
func (l *Limiter) Backoff(ctx context.Context, channel string, wait time.Duration) error {
	ck, err := l.channel(channel)
	if err != nil {
		return fmt.Errorf("backoff %s: %w", channel, err)
	}
	if err := l.backoff(ctx, ck, ck.pausedUntil, wait); err != nil {
		return fmt.Errorf("backoff %s: %w", channel, err)
	}
	return nil
}

// BackoffScope backs off the window a 429 came from: on a channel that limits per
// property, only property's window for family f (the family, or the endpoint it
// shares) — the channel's other properties go on; on any other channel, the whole
// channel, as Backoff. As with Backoff, the pace restarts without a burst.
func (l *Limiter) BackoffScope(ctx context.Context, channel, property string, f models.Family, wait time.Duration) error {
	ck, err := l.channel(channel)
	if err != nil {
		return fmt.Errorf("backoff %s: %w", channel, err)
	}
	if ck.cfg.Scope != models.ScopeProperty {
		return l.Backoff(ctx, channel, wait)
	}
	if property == "" {
		return fmt.Errorf("backoff %s: no property on a per-property channel: %w", channel, ErrInvalidRequest)
	}
	scope := ck.scope(property, f)
	if wait <= 0 {
		return nil
	}
	if err := backoffScript.Run(ctx, l.rdb, []string{ck.base + "paused_until:" + scope, ck.backoffs}, ceilMS(wait),
		(ck.cfg.WindowLength() + l.opts.Margin).Milliseconds(), scope).Err(); err != nil {
		return fmt.Errorf("backoff %s/%s: %w", channel, scope, err)
	}
	return nil
}

// BackoffsOf tells, for each of scopes on channel, what is left of the back-off
// that holds its requests: the channel's (Backoff, or rate-limit headers reporting
// nothing left) or, on a channel that limits per property, its property's window's
// (BackoffScope), whichever ends later; zero when none does. One round trip.
func (l *Limiter) BackoffsOf(ctx context.Context, channel string, scopes []Scope) ([]time.Duration, error) {
	ck, err := l.channel(channel)
	if err != nil {
		return nil, fmt.Errorf("backoffs %s: %w", channel, err)
	}
	if len(scopes) == 0 {
		return nil, nil
	}
	// Each distinct window is asked once: a post's changes share few.
	args := make([]any, 0, len(scopes))
	at := make(map[string]int, len(scopes))
	of := make([]int, len(scopes))
	for i, sc := range scopes {
		if ck.cfg.Scope == models.ScopeProperty && sc.Property == "" {
			return nil, fmt.Errorf("backoffs %s: no property on a per-property channel: %w", channel, ErrInvalidRequest)
		}
		key := ck.scope(sc.Property, sc.Family)
		n, ok := at[key]
		if !ok {
			n = len(at)
			at[key] = n
			args = append(args, key)
		}
		of[i] = n
	}
	res, err := backoffsOfScript.Run(ctx, l.rdb, []string{ck.pausedUntil, ck.backoffs}, args...).Slice()
	if err != nil {
		return nil, fmt.Errorf("backoffs %s: %w", channel, err)
	}
	if len(res) != len(at) {
		return nil, fmt.Errorf("backoffs %s: script reply has %d fields", channel, len(res))
	}
	out := make([]time.Duration, len(scopes))
	for i := range scopes {
		out[i] = msField(res[of[i]])
	}
	return out, nil
}

// StopFamily stops family f of channel for wait from now (by the Redis clock), as
// after a quota_exhausted answer to a push of that family: Reserve answers Quota
// (tier stop) to every request of f until then, and the channel's other families
// go on. It never shortens a longer stop already in force; Status reports it.
func (l *Limiter) StopFamily(ctx context.Context, channel string, f models.Family, wait time.Duration) error {
	ck, err := l.channel(channel)
	if err != nil {
		return fmt.Errorf("stop %s/%s: %w", channel, f, err)
	}
	if err := l.backoff(ctx, ck, ck.quotaStop(f), wait); err != nil {
		return fmt.Errorf("stop %s/%s: %w", channel, f, err)
	}
	return nil
}

func (l *Limiter) backoff(ctx context.Context, ck channelKeys, key string, wait time.Duration) error {
	if wait <= 0 {
		return nil
	}
	return backoffScript.Run(ctx, l.rdb, []string{key}, ceilMS(wait),
		(ck.cfg.WindowLength() + l.opts.Margin).Milliseconds()).Err()
}

// Adapt reads a channel's rate-limit headers against our own schedule. They lower the
// limit only when they report less room than our own traffic leaves — another
// client shares the budget, or the channel lowered its limit — for as long as the
// server's window takes to reset; our own traffic never lowers it. Remaining = 0 that
// our schedule does not explain makes every worker wait for the reset. remaining < 0
// means the header was absent; a non-positive resetAfter makes the headers unusable.
func (l *Limiter) Adapt(ctx context.Context, channel, property string, f models.Family, limit, remaining int, resetAfter time.Duration) error {
	ck, err := l.channel(channel)
	if err != nil {
		return fmt.Errorf("adapt %s: %w", channel, err)
	}
	if resetAfter <= 0 {
		return nil
	}
	scope := ck.scope(property, f)
	if err := adaptScript.Run(ctx, l.rdb, []string{ck.base + "adaptive:" + scope, ck.pausedUntil, ck.base + "sched:" + scope},
		ck.cfg.RatePerMinute, limit, remaining, ceilMS(resetAfter), ck.cfg.WindowLength().Milliseconds()).Err(); err != nil {
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
	if err := pauseScript.Run(ctx, l.rdb, []string{ck.pause}, reason, l.opts.PauseTTL.Milliseconds()).Err(); err != nil {
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
	if err := resumeScript.Run(ctx, l.rdb, []string{ck.pause, ck.pausedUntil}).Err(); err != nil {
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
	scope := ck.scope("", "")
	keys := []string{ck.pause, ck.pausedUntil, ck.daily, ck.base + "adaptive:" + scope,
		ck.base + "sched:" + scope, ck.base + "tat:" + scope, ck.breaker, ck.backoffs}
	for _, f := range models.Families {
		keys = append(keys, ck.quotaStop(f))
	}
	res, err := statusScript.Run(ctx, l.rdb, keys, ck.cfg.DailyQuota, ck.cfg.RatePerMinute,
		l.opts.Margin.Milliseconds(), ck.cfg.WindowLength().Milliseconds(), StatusBackoffs).Slice()
	if err != nil {
		return Status{}, fmt.Errorf("status %s: %w", channel, err)
	}
	fixed := 14 + len(models.Families)
	if len(res) < fixed || (len(res)-fixed)%2 != 0 {
		return Status{}, fmt.Errorf("status %s: script reply has %d fields", channel, len(res))
	}
	st := Status{Channel: channel, DailyLimit: ck.cfg.DailyQuota}
	st.PausedReason, _ = res[0].(string)
	st.PausedFor = msField(res[1])
	st.DailyUsed = intField(res[2])
	st.Tier = tierOf(st.DailyUsed, st.DailyLimit)
	st.QuotaResetsIn = msField(res[3])
	st.Foreign = intField(res[4])
	st.ForeignFor = msField(res[5])
	if ck.cfg.Scope != models.ScopeProperty {
		st.Limit, st.InWindow, st.Ahead = intField(res[6]), intField(res[7]), intField(res[8])
		st.NextSlotIn = msField(res[9])
	}
	st.Breaker, _ = res[10].(string)
	if st.Breaker == "half" {
		st.Breaker = BreakerHalf
	}
	st.BreakerOpenFor = msField(res[11])
	st.Failures = intField(res[12])
	st.BackedOff = intField(res[13])
	for i, f := range models.Families {
		if left := msField(res[14+i]); left > 0 {
			st.Stopped = append(st.Stopped, FamilyStop{Family: f, For: left})
		}
	}
	for i := fixed; i+1 < len(res); i += 2 {
		sc, _ := res[i].(string)
		// A scope is <property>:<window>; a window name holds no ':'.
		cut := strings.LastIndexByte(sc, ':')
		if cut < 0 {
			continue
		}
		st.Backoffs = append(st.Backoffs, ScopeBackoff{Property: sc[:cut], Window: sc[cut+1:], For: msField(res[i+1])})
	}
	return st, nil
}

// tierOf mirrors tier() in lua/prelude.lua for state read back by Status.
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

func intField(v any) int {
	switch n := v.(type) {
	case int64:
		return int(n)
	case string:
		f, err := strconv.ParseFloat(strings.TrimSpace(n), 64)
		if err == nil {
			return int(f)
		}
	}
	return 0
}

func msField(v any) time.Duration {
	return time.Duration(intField(v)) * time.Millisecond
}

// ceilMS rounds up so that a wait is never cut short by truncation.
func ceilMS(d time.Duration) int64 {
	return int64(math.Ceil(float64(d) / float64(time.Millisecond)))
}

// dayNumber is d as days since 1970-01-01, the gate's night key.
func dayNumber(d models.Date) int64 {
	return d.Time().Unix() / 86400
}

func dateOfNumber(n int64) models.Date {
	return models.DateOf(time.Unix(n*86400, 0).UTC())
}
