package ops

import (
	"cmp"
	"slices"
	"strconv"
	"time"

	"github.com/paritysync/paritysync/models"
)

// DryRunReport is what a batch would do, decided without starting or storing
// anything: the rows refused (field and rule), and per channel the requests the
// coalescer makes of the rest and the time the channel's windows need for them.
type DryRunReport struct {
	Mutations int                 `json:"mutations"`
	Accepted  int                 `json:"accepted"`
	Rejected  []models.RowProblem `json:"rejected"`
	// Superseded counts the family parts a newer version in the same batch made
	// pointless; the real run also drops parts older than the desired state already
	// stored, so its requests can only be fewer.
	Superseded int           `json:"superseded"`
	Requests   int           `json:"requests"`
	Lines      int           `json:"lines"`
	Channels   []ChannelPlan `json:"channels"`
	// TimeNeeded is the slowest channel's: channels are served side by side.
	TimeNeeded   string `json:"time_needed"`
	TimeNeededMS int64  `json:"time_needed_ms"`
}

// ChannelPlan is one channel's share of a dry run.
type ChannelPlan struct {
	Channel string `json:"channel"`
	// Updates are the family parts of accepted mutations that go to the channel.
	Updates    int `json:"updates"`
	Superseded int `json:"superseded"`
	Requests   int `json:"requests"`
	Lines      int `json:"lines"`
	Properties int `json:"properties"`
	InFlight   int `json:"in_flight"`
	// RatePerMinute requests per Window, counted per channel or per property
	// (Scope); BusiestRequests are the requests of the scope (the channel, or one
	// property's endpoint window) that has the most.
	RatePerMinute   int               `json:"rate_per_minute"`
	Window          string            `json:"window"`
	Scope           models.LimitScope `json:"scope"`
	BusiestRequests int               `json:"busiest_requests"`
	// TimeNeeded is BusiestRequests at the declared rate: BusiestRequests ÷
	// RatePerMinute windows (the first burst goes at once; a quota tier, a pause or
	// a 429 makes it longer).
	TimeNeeded   string `json:"time_needed"`
	TimeNeededMS int64  `json:"time_needed_ms"`
}

// DryRun validates d with v and coalesces the valid rows exactly as PrepareBatch
// does (defaults applied, models.Coalesce, models.PlanInFlight), then reckons the
// time each channel's windows need. It starts nothing, stores nothing and reads no
// store; batchID names the rows without an id as PrepareBatch would.
func DryRun(d models.Decoded, v *models.Validator, channels map[string]models.ChannelConfig, maxInFlight int, batchID string) DryRunReport {
	valid, problems := v.Check(d)
	if problems == nil {
		problems = []models.RowProblem{}
	}
	r := DryRunReport{Mutations: d.Rows, Accepted: len(valid), Rejected: problems, Channels: []ChannelPlan{}}
	ms := make([]models.Mutation, 0, len(valid))
	for i, m := range valid {
		m.ApplyDefaults(func() string { return batchID + "#" + strconv.Itoa(i) })
		ms = append(ms, v.Expand(m).Nights...) // a range as its nights, as PrepareBatch does
	}
	co := models.Coalesce(ms, channels)
	by := map[string]*ChannelPlan{}
	plan := func(ch string) *ChannelPlan {
		p, ok := by[ch]
		if !ok {
			cfg, known := channels[ch]
			if !known {
				cfg = models.NewChannelConfig(ch, models.DefaultRatePerMinute)
			}
			p = &ChannelPlan{Channel: ch, RatePerMinute: cfg.RatePerMinute, Window: cfg.WindowLength().String(), Scope: cfg.Scope}
			by[ch] = p
		}
		return p
	}
	for _, m := range ms {
		plan(m.Channel).Updates += len(m.Families())
	}
	for _, s := range co.Superseded {
		plan(s.Channel).Superseded++
		r.Superseded++
	}
	type scope struct{ channel, property, window string }
	perScope := map[scope]int{}
	for _, q := range co.Requests {
		p := plan(q.Channel)
		p.Requests++
		p.Lines += len(q.Lines)
		k := scope{channel: q.Channel}
		if cfg, ok := channels[q.Channel]; ok && cfg.Scope == models.ScopeProperty {
			k.property, k.window = q.PropertyID, cfg.WindowOf(q.Family)
		}
		perScope[k]++
		p.BusiestRequests = max(p.BusiestRequests, perScope[k])
	}
	for _, f := range models.PlanInFlight(co.Requests, channels, maxInFlight) {
		p := plan(f.Channel)
		p.Properties, p.InFlight = f.Properties, f.InFlight
	}
	var slowest time.Duration
	for _, p := range by {
		cfg, known := channels[p.Channel]
		if !known {
			cfg = models.NewChannelConfig(p.Channel, models.DefaultRatePerMinute)
		}
		need := WindowTime(p.BusiestRequests, cfg)
		p.TimeNeeded, p.TimeNeededMS = need.String(), need.Milliseconds()
		slowest = max(slowest, need)
		r.Requests += p.Requests
		r.Lines += p.Lines
		r.Channels = append(r.Channels, *p)
	}
	slices.SortFunc(r.Channels, func(a, b ChannelPlan) int { return cmp.Compare(a.Channel, b.Channel) })
	r.TimeNeeded, r.TimeNeededMS = slowest.String(), slowest.Milliseconds()
	return r
}

// WindowTime is how long requests take at channel c's declared rate in one of its
// scopes: requests ÷ rate_per_minute windows, rounded to the millisecond.
func WindowTime(requests int, c models.ChannelConfig) time.Duration {
	if requests <= 0 || c.RatePerMinute <= 0 {
		return 0
	}
	w := c.WindowLength()
	return (time.Duration(requests) * w / time.Duration(c.RatePerMinute)).Round(time.Millisecond)
}
