package sim

// ChannelStats are the counters of one channel, as GET /stats reports them.
type ChannelStats struct {
	// Limit is the channel's requests per sliding window (Window, 60 s by default;
	// per property when the channel is property-scoped).
	Limit int `json:"limit"`
	// Requests counts every request to the channel's ARI endpoint.
	Requests int `json:"requests"`
	// Accepted counts pushes answered 200 whose lines the channel took.
	Accepted int `json:"accepted"`
	// Partial counts pushes answered 207.
	Partial int `json:"partial"`
	// Throttled counts 429 answers, from the limit or a storm.
	Throttled int `json:"throttled"`
	// ServerErrors counts 5xx answers, injected or from a 503 storm.
	ServerErrors int `json:"server_errors"`
	// Duplicates counts pushes answered by idempotent replay.
	Duplicates int `json:"duplicates"`
	// StaleOverwrites counts nights a line tried to set with a lower version than
	// the channel held; those nights were not changed.
	StaleOverwrites int `json:"stale_overwrites"`
	// OlderApplied counts nights a late apply (Faults.ApplyDelayMS) overwrote with
	// an older version than the channel held: a client that keeps apply order, not
	// only send order, keeps it at 0.
	OlderApplied int `json:"older_applied"`
	// StaleReceived counts admitted pushes that carried, for at least one night, an
	// older version than a push the channel had already received for that night and
	// family, whether or not that earlier push was applied. A client that orders its
	// pushes keeps it at 0; a real channel would apply such a push.
	StaleReceived int `json:"stale_received"`
	// Reads counts reads of channel state (GET) admitted within the limit; reads
	// share the push window, so they count toward MaxWindowRequests too.
	Reads int `json:"reads"`
	// AuthFailures counts 401 answers.
	AuthFailures int `json:"auth_failures"`
	// Invalid counts 4xx answers to malformed requests.
	Invalid int `json:"invalid"`
	// QuotaExhausted counts 400 quota_exhausted answers.
	QuotaExhausted int `json:"quota_exhausted"`
	// FaultsInjected counts requests a fault changed.
	FaultsInjected int `json:"faults_injected"`
	// NightsApplied counts nights written to the channel's state.
	NightsApplied int `json:"nights_applied"`
	// MaxWindowRequests is the most valid pushes and state reads that arrived in
	// any window of one limit key; a client that respects the limit keeps it
	// <= Limit.
	MaxWindowRequests int `json:"max_window_requests"`
	// EarlyArrivals counts valid pushes and reads that arrived before the time the
	// latest Retry-After for their limit key announced: a client that waits out
	// every Retry-After, on the channel's clock, keeps it at 0 (beyond requests
	// already in flight when the Retry-After was sent).
	EarlyArrivals int `json:"early_arrivals"`
	// DailyUsed is the quota spent today (UTC); DailyQuota 0 means unlimited.
	DailyUsed  int `json:"daily_used"`
	DailyQuota int `json:"daily_quota"`
}

// Stats is a snapshot of every channel's counters, keyed by slug.
func (s *Simulator) Stats() map[string]ChannelStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	out := make(map[string]ChannelStats, len(s.bySlug))
	for slug, ch := range s.bySlug {
		ch.rollQuota(now)
		out[slug] = ch.stats
	}
	return out
}
