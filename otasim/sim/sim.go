package sim

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"mime"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/paritysync/paritysync/models"
)

// maxIdempotencyKeyLen bounds the X-Idempotency-Key header.
const maxIdempotencyKeyLen = 255

// maxStateNights bounds the date range of one GET of channel state.
const maxStateNights = 1000

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

// Simulator is a strict OTA channel. It is safe for concurrent use.
type Simulator struct {
	cfg    Config
	now    func() time.Time
	static map[string]bool
	closed chan struct{}
	close  sync.Once

	mu         sync.Mutex
	log        []RequestRecord // oldest first, at most cfg.MaxLogRecords
	rng        *rand.Rand
	faults     Faults
	stormUntil time.Time
	bySlug     map[string]*channel
	byPath     map[string]*channel
}

// channel is the mutable state of one served channel.
type channel struct {
	cfg       models.ChannelConfig
	windows   map[string]*window // admitted pushes per limit key
	arrivals  map[string]*window // valid pushes per limit key, for MaxWindowRequests
	quotaDay  models.Date
	idem      map[string]stored
	idemOrder []idemEntry
	cells     map[string]map[cellKey]*cellState // by property
	received  map[receivedKey]int64             // newest version received per night
	stats     ChannelStats
	throttles int // alternates the Retry-After form
	// retryAfter is Config.RetryAfter; announced is, per limit key, the latest time
	// a Retry-After named.
	retryAfter string
	announced  map[string]time.Time
	seq        int // confirmation ids
	// deferred, while a push with Faults.ApplyDelayMS is decided, collects its
	// writes, and the reply kept for its replay, instead of making them; applied is
	// the apply log, oldest first, at most maxLog records.
	deferred *[]func(now time.Time)
	applied  []ApplyRecord
	maxLog   int
	clock    func() time.Time // the simulator's
}

// ApplyRecord is one line as the channel wrote it to its state, in apply order.
type ApplyRecord struct {
	At           time.Time     `json:"at"`
	Property     string        `json:"property"`
	Family       models.Family `json:"family"`
	RoomTypeCode string        `json:"room_type_code"`
	RatePlanCode string        `json:"rate_plan_code"`
	From         models.Date   `json:"from"`
	To           models.Date   `json:"to"`
	Version      int64         `json:"version"`
	// Days are the days of the week the write kept of From..To (every day when
	// empty).
	Days models.Weekdays `json:"days,omitzero"`
	// Late is true for a write Faults.ApplyDelayMS delayed.
	Late bool `json:"late,omitempty"`
}

type stored struct {
	bodyHash [32]byte
	rep      reply
	at       time.Time
}

type idemEntry struct {
	key string
	at  time.Time
}

// receivedKey is a night of one family, for StaleReceived.
type receivedKey struct {
	property string
	family   models.Family
	cell     cellKey
}

type cellKey struct {
	room, rate string
	date       models.Date
}

// cellState keeps the version per family: families are pushed independently, so a
// stale rates line must not be judged against the version an availability line set.
type cellState struct {
	cell     models.ARICell
	versions map[models.Family]int64
}

// reply is a complete response, kept whole so an idempotent replay is verbatim.
type reply struct {
	status int
	header http.Header
	body   []byte
}

// New builds a simulator; zero Config fields take the documented defaults.
func New(cfg Config) *Simulator {
	cfg = cfg.withDefaults()
	s := &Simulator{
		cfg:    cfg,
		now:    cfg.Now,
		static: map[string]bool{},
		closed: make(chan struct{}),
		rng:    rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15)),
		bySlug: map[string]*channel{},
		byPath: map[string]*channel{},
	}
	for _, t := range cfg.StaticTokens {
		if t != "" {
			s.static[t] = true
		}
	}
	for _, c := range cfg.Channels {
		ch := &channel{
			cfg: c, windows: map[string]*window{}, arrivals: map[string]*window{},
			idem: map[string]stored{}, cells: map[string]map[cellKey]*cellState{},
			received: map[receivedKey]int64{}, retryAfter: cfg.RetryAfter, announced: map[string]time.Time{},
			maxLog: cfg.MaxLogRecords, clock: cfg.Now,
		}
		ch.stats.Limit, ch.stats.DailyQuota = c.RatePerMinute, c.DailyQuota
		s.bySlug[c.Slug] = ch
		s.byPath[strings.TrimSuffix(c.BasePath, "/")] = ch
	}
	// An invalid start configuration is the operator's to fix; the binary validates
	// it before calling New, so here it only means no faults.
	if cfg.Faults.Validate() == nil {
		s.setFaultsLocked(cfg.Faults)
	}
	return s
}

// Close releases hanging requests; the simulator keeps serving otherwise.
func (s *Simulator) Close() { s.close.Do(func() { close(s.closed) }) }

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

// SetFaults replaces the injected faults; a storm starts now.
func (s *Simulator) SetFaults(f Faults) error {
	if err := f.Validate(); err != nil {
		return fmt.Errorf("faults: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.setFaultsLocked(f)
	return nil
}

func (s *Simulator) setFaultsLocked(f Faults) {
	f.StormUntil = nil
	f.Channels = slices.Clone(f.Channels)
	s.faults = f
	s.stormUntil = time.Time{}
	if f.StormSeconds > 0 {
		s.stormUntil = s.now().Add(time.Duration(f.StormSeconds) * time.Second)
	}
}

// Faults are the faults in force, with StormUntil set while a storm lasts.
func (s *Simulator) Faults() Faults {
	s.mu.Lock()
	defer s.mu.Unlock()
	f := s.faults
	f.Channels = slices.Clone(f.Channels)
	if until := s.stormUntil; until.After(s.now()) {
		f.StormUntil = &until
	}
	return f
}

// ServeHTTP routes POST and GET {base_path}/ari, GET /stats and /admin/faults.
func (s *Simulator) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	w := &datedWriter{ResponseWriter: rw, now: s.now}
	path := r.URL.Path
	switch path {
	case "/stats":
		if !allow(w, r, http.MethodGet) {
			return
		}
		writeJSON(w, http.StatusOK, s.Stats())
		return
	case "/admin/faults":
		s.serveFaults(w, r)
		return
	case "/requests":
		if !allow(w, r, http.MethodGet) {
			return
		}
		s.serveRequests(w, r)
		return
	}
	if s.serveProtocol(w, r) {
		return
	}
	base, ok := strings.CutSuffix(path, "/ari")
	ch := s.byPath[base] // immutable after New
	if !ok || ch == nil || !ch.generic() {
		writeJSON(w, http.StatusNotFound, models.ARIError{Error: models.ErrorInvalid, Message: "path: no such endpoint"})
		return
	}
	switch r.Method {
	case http.MethodPost:
		s.servePush(w, r, ch)
	case http.MethodGet:
		s.serveState(w, r, ch)
	default:
		allow(w, r, http.MethodPost, http.MethodGet)
	}
}

// datedWriter stamps an answer's Date header from the simulator's clock as the
// answer is written, so clients read the channel's time, offset included; net/http
// keeps a Date the handler set.
type datedWriter struct {
	http.ResponseWriter
	now   func() time.Time
	wrote bool
}

func (d *datedWriter) WriteHeader(code int) {
	if !d.wrote {
		d.wrote = true
		d.Header().Set("Date", d.now().UTC().Format(http.TimeFormat))
	}
	d.ResponseWriter.WriteHeader(code)
}

func (d *datedWriter) Write(b []byte) (int, error) {
	if !d.wrote {
		d.WriteHeader(http.StatusOK)
	}
	return d.ResponseWriter.Write(b)
}

func allow(w http.ResponseWriter, r *http.Request, methods ...string) bool {
	if slices.Contains(methods, r.Method) {
		return true
	}
	w.Header().Set("Allow", strings.Join(methods, ", "))
	writeJSON(w, http.StatusMethodNotAllowed, models.ARIError{Error: models.ErrorInvalid, Message: "method: not allowed"})
	return false
}

func (s *Simulator) serveFaults(w http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case http.MethodGet:
		writeJSON(w, http.StatusOK, s.Faults())
	case http.MethodPost:
		var f Faults
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 64<<10))
		if err == nil {
			err = strictUnmarshal(body, &f)
		}
		if err == nil {
			err = s.SetFaults(f)
		}
		if err != nil {
			writeJSON(w, http.StatusBadRequest, models.ARIError{Error: models.ErrorInvalid, Message: cleanJSONError(err)})
			return
		}
		writeJSON(w, http.StatusOK, s.Faults())
	default:
		allow(w, r, http.MethodGet, http.MethodPost)
	}
}

func (s *Simulator) servePush(w http.ResponseWriter, r *http.Request, ch *channel) {
	body, readErr, f, ok := s.receive(w, r, ch)
	if !ok {
		return
	}
	s.mu.Lock()
	now := s.now()
	rec := RequestRecord{At: now, Channel: ch.cfg.Slug}
	late := ch.deferApplies(f)
	rep, key := s.push(ch, r, body, readErr, now, f, &rec)
	ch.deferred = nil
	ch.rateHeaders(key, now, rep.header)
	rec.Status = rep.status
	s.record(rec)
	s.mu.Unlock()
	s.applyLate(ch, f, *late)
	rep.write(w)
}

// receive counts a push, picks the faults that apply to it, delays it by the
// latency faults and reads its body; false means the client is gone. The body is
// read before taking the lock: a slow client must not stall others.
func (s *Simulator) receive(w http.ResponseWriter, r *http.Request, ch *channel) ([]byte, error, Faults, bool) {
	s.mu.Lock()
	ch.stats.Requests++
	f := s.faults
	if !f.appliesTo(ch.cfg.Slug) {
		f = Faults{}
	}
	if f.Hang || f.LatencyMS > 0 {
		ch.stats.FaultsInjected++
	}
	s.mu.Unlock()
	if !s.delay(r.Context(), f) {
		return nil, nil, f, false
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes))
	return body, err, f, true
}

// stormStatus is the status of a push that arrives during a storm the faults
// started, counted; 0 outside a storm.
func (s *Simulator) stormStatus(ch *channel, f Faults, now time.Time) int {
	if !now.Before(s.stormUntil) || f.StormSeconds <= 0 {
		return 0
	}
	ch.stats.FaultsInjected++
	status := f.StormStatus
	if status == 0 {
		status = http.StatusTooManyRequests
	}
	if status == http.StatusTooManyRequests {
		ch.stats.Throttled++
	} else {
		ch.stats.ServerErrors++
	}
	return status
}

// serverError rolls the error fault of a push: true, counted, when it strikes.
func (s *Simulator) serverError(ch *channel, f Faults) bool {
	if !s.roll(f.ErrorRatio) {
		return false
	}
	ch.stats.FaultsInjected++
	ch.stats.ServerErrors++
	return true
}

// serverStatus is a 5xx status, picked at random.
func (s *Simulator) serverStatus() int {
	statuses := []int{500, 502, 503, 504}
	return statuses[s.rng.IntN(len(statuses))]
}

// outcomeFaults rolls the drift and partial faults of a push that is to succeed:
// drift answers success and applies nothing, partial fails some of its units.
func (s *Simulator) outcomeFaults(ch *channel, f Faults) (drift, partial bool) {
	drift = s.roll(f.DriftRatio)
	partial = !drift && s.roll(f.PartialRatio)
	if drift || partial {
		ch.stats.FaultsInjected++
	}
	return drift, partial
}

// failsUnit rolls whether a partial fault fails unit i of n: each at even odds,
// and the last when none failed before, so a partial answer fails at least one.
func (s *Simulator) failsUnit(partial bool, i, n int, noneYet bool) bool {
	return partial && (s.rng.IntN(2) == 0 || i == n-1 && noneYet)
}

// deferApplies makes the push about to be decided collect its writes when f delays
// them; s.mu held. It returns where they are collected.
func (ch *channel) deferApplies(f Faults) *[]func(time.Time) {
	q := &[]func(time.Time){}
	if f.ApplyDelayMS > 0 {
		ch.deferred = q
	}
	return q
}

// applyLate writes the lines a delayed push collected, f.ApplyDelayMS after it was
// received, whether or not its client is still waiting: the channel received it.
// Only then is its reply kept for replay: a re-send that arrives meanwhile is
// another push, applied in its turn.
func (s *Simulator) applyLate(ch *channel, f Faults, q []func(time.Time)) {
	if len(q) == 0 {
		return
	}
	t := time.NewTimer(time.Duration(f.ApplyDelayMS) * time.Millisecond)
	select {
	case <-t.C:
	case <-s.closed:
		t.Stop()
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	ch.stats.FaultsInjected++
	now := s.now()
	for _, do := range q {
		do(now)
	}
}

// Applied is the apply log of channel (every channel for ""), oldest first.
func (s *Simulator) Applied(channel string) []ApplyRecord {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []ApplyRecord
	for slug, ch := range s.bySlug {
		if channel == "" || slug == channel {
			out = append(out, ch.applied...)
		}
	}
	return out
}

// delay applies the latency and hang faults; false means the client is gone.
func (s *Simulator) delay(ctx context.Context, f Faults) bool {
	if f.Hang {
		select {
		case <-ctx.Done():
		case <-s.closed:
		}
		return false
	}
	if f.LatencyMS > 0 {
		t := time.NewTimer(time.Duration(f.LatencyMS) * time.Millisecond)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return false
		case <-s.closed:
			return false
		}
	}
	return true
}

// push decides one push; it runs under s.mu and returns the limit key it counted
// against ("" when the request never got that far).
func (s *Simulator) push(ch *channel, r *http.Request, body []byte, readErr error, now time.Time, f Faults, rec *RequestRecord) (reply, string) {
	if !s.authorized(r.Header.Get("Authorization"), now) {
		ch.stats.AuthFailures++
		rep := errorReply(http.StatusUnauthorized, models.ErrorUnauthorized, "bearer token missing, unknown or expired")
		rep.header.Set("WWW-Authenticate", `Bearer error="invalid_token"`)
		return rep, ""
	}
	if readErr != nil {
		ch.stats.Invalid++
		var tooBig *http.MaxBytesError
		if errors.As(readErr, &tooBig) {
			return errorReply(http.StatusRequestEntityTooLarge, models.ErrorInvalid,
				fmt.Sprintf("body: larger than %d bytes", tooBig.Limit)), ""
		}
		return errorReply(http.StatusBadRequest, models.ErrorInvalid, "body: unreadable"), ""
	}
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		ch.stats.Invalid++
		return errorReply(http.StatusUnsupportedMediaType, models.ErrorInvalid, "Content-Type: want application/json"), ""
	}
	idemKey := r.Header.Get(models.HeaderIdempotencyKey)
	if idemKey == "" || len(idemKey) > maxIdempotencyKeyLen {
		ch.stats.Invalid++
		return errorReply(http.StatusBadRequest, models.ErrorInvalid,
			fmt.Sprintf("%s: required, at most %d characters", models.HeaderIdempotencyKey, maxIdempotencyKeyLen)), ""
	}
	req, err := decodeRequest(body, ch.cfg)
	if err != nil {
		ch.stats.Invalid++
		return errorReply(http.StatusBadRequest, models.ErrorInvalid, err.Error()), ""
	}
	rec.Property, rec.Family, rec.Lines = req.PropertyID, req.Family, len(req.Lines)
	for _, l := range req.Lines {
		rec.Nights += l.Nights()
	}

	key := ch.limitKey(req.PropertyID)
	ch.arrive(key, now)

	if status := s.stormStatus(ch, f, now); status != 0 {
		return ch.throttle(key, status, s.stormUntil.Sub(now), now), key
	}
	win := ch.window(ch.windows, key)
	if win.count(now) >= ch.cfg.RatePerMinute {
		ch.stats.Throttled++
		return ch.throttle(key, http.StatusTooManyRequests, win.nextFree(now), now), key
	}
	win.add(now)
	ch.receive(req)

	hash := sha256.Sum256(body)
	ch.pruneIdem(now, s.cfg.IdempotencyTTL)
	if prev, ok := ch.idem[idemKey]; ok {
		if prev.bodyHash != hash {
			ch.stats.Invalid++
			return errorReply(http.StatusBadRequest, models.ErrorInvalid,
				models.HeaderIdempotencyKey+": reused with a different body"), key
		}
		ch.stats.Duplicates++
		return prev.rep.clone(), key
	}

	cost := 1
	if ch.cfg.QuotaUnit == models.QuotaLines {
		cost = len(req.Lines)
	}
	ch.rollQuota(now)
	if ch.cfg.DailyQuota > 0 && ch.stats.DailyUsed+cost > ch.cfg.DailyQuota {
		ch.stats.QuotaExhausted++
		return errorReply(http.StatusBadRequest, models.ErrorQuotaExhausted,
			fmt.Sprintf("daily quota of %d %s used; resets at 00:00 UTC", ch.cfg.DailyQuota, ch.cfg.QuotaUnit)), key
	}
	ch.stats.DailyUsed += cost

	if s.serverError(ch, f) {
		return errorReply(s.serverStatus(), models.ErrorServer, "injected server error"), key
	}

	if rep, bad := s.badBody(ch, f, func() (reply, reply) {
		return s.acceptedReply(ch, len(req.Lines)), errorReply(http.StatusBadRequest, models.ErrorInvalid, "injected error inside a 200")
	}); bad {
		return rep, key
	}

	drift, partial := s.outcomeFaults(ch, f)
	failed := map[int]bool{}
	if partial {
		for i := range req.Lines {
			if s.rng.IntN(2) == 0 {
				failed[i] = true
			}
		}
		if len(failed) == 0 {
			failed[s.rng.IntN(len(req.Lines))] = true
		}
	}
	if !drift {
		for i, l := range req.Lines {
			if !failed[i] {
				ch.apply(req.PropertyID, req.Family, l)
			}
		}
	}

	ch.seq++
	conf := fmt.Sprintf("%s-%06d", ch.cfg.Slug, ch.seq)
	var rep reply
	if len(failed) == 0 {
		ch.stats.Accepted++
		rep = jsonReply(http.StatusOK, models.ARIAccepted{ConfirmationID: conf, Accepted: len(req.Lines)})
	} else {
		ch.stats.Partial++
		res := models.ARIPartial{ConfirmationID: conf, Results: make([]models.ARILineResult, len(req.Lines))}
		for i := range req.Lines {
			res.Results[i] = models.ARILineResult{Line: i, Status: models.LineOK}
			if failed[i] {
				res.Results[i] = models.ARILineResult{Line: i, Status: models.LineError,
					Code: "line_rejected", Message: "injected line failure"}
			}
		}
		rep = jsonReply(http.StatusMultiStatus, res)
	}
	rep.header.Set(models.HeaderConfirmationID, conf)
	ch.rememberHash(idemKey, hash, rep, now)

	if s.roll(f.CommitThen500Ratio) {
		ch.stats.FaultsInjected++
		ch.stats.ServerErrors++
		return errorReply(http.StatusInternalServerError, models.ErrorServer, "injected error after commit"), key
	}
	return rep, key
}

// acceptedReply is the 200 the generic protocol would give n lines, for the
// truncated bad body; it takes no confirmation number.
func (s *Simulator) acceptedReply(ch *channel, n int) reply {
	conf := fmt.Sprintf("%s-%06d", ch.cfg.Slug, ch.seq+1)
	rep := jsonReply(http.StatusOK, models.ARIAccepted{ConfirmationID: conf, Accepted: n})
	rep.header.Set(models.HeaderConfirmationID, conf)
	return rep
}

// roll draws one fault; a zero ratio draws nothing so unrelated faults do not shift
// the random sequence a test relies on.
func (s *Simulator) roll(ratio float64) bool {
	return ratio > 0 && s.rng.Float64() < ratio
}

// authorized accepts a bearer token that tokenValid accepts.
func (s *Simulator) authorized(h string, now time.Time) bool {
	scheme, tok, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || tok == "" {
		return false
	}
	return s.tokenValid(tok, now)
}

// tokenValid accepts a static token, or a simtoken-<unix> issued no later than a
// minute from now and no longer than TokenMaxAge ago.
func (s *Simulator) tokenValid(tok string, now time.Time) bool {
	if tok == "" {
		return false
	}
	if s.static[tok] {
		return true
	}
	digits, ok := strings.CutPrefix(tok, TokenPrefix)
	if !ok {
		return false
	}
	sec, err := strconv.ParseInt(digits, 10, 64)
	if err != nil || sec < 0 || sec > now.Unix()+60 {
		return false
	}
	return now.Unix()-sec <= int64(s.cfg.TokenMaxAge/time.Second)
}

func (s *Simulator) serveState(w http.ResponseWriter, r *http.Request, ch *channel) {
	s.mu.Lock()
	now := s.now()
	rep, key := s.state(ch, r, now)
	ch.rateHeaders(key, now, rep.header)
	s.mu.Unlock()
	rep.write(w)
}

// state answers GET {base}/ari, and the limit key it counted in. Reads count in
// the same sliding window as pushes, as on channels that meter every call: a read
// over the limit is a 429 with Retry-After.
func (s *Simulator) state(ch *channel, r *http.Request, now time.Time) (reply, string) {
	if !s.authorized(r.Header.Get("Authorization"), now) {
		ch.stats.AuthFailures++
		return errorReply(http.StatusUnauthorized, models.ErrorUnauthorized, "bearer token missing, unknown or expired"), ""
	}
	q := r.URL.Query()
	prop := q.Get("property_id")
	if prop == "" {
		return errorReply(http.StatusBadRequest, models.ErrorInvalid, "property_id: required"), ""
	}
	from, err := models.ParseDate(q.Get("from"))
	if err != nil {
		return errorReply(http.StatusBadRequest, models.ErrorInvalid, "from: "+err.Error()), ""
	}
	to, err := models.ParseDate(q.Get("to"))
	if err != nil {
		return errorReply(http.StatusBadRequest, models.ErrorInvalid, "to: "+err.Error()), ""
	}
	if to.Before(from) || to.DaysSince(from) >= maxStateNights {
		return errorReply(http.StatusBadRequest, models.ErrorInvalid,
			fmt.Sprintf("to: must be within %d nights on or after from", maxStateNights)), ""
	}
	key := ch.limitKey(prop)
	ch.arrive(key, now)
	win := ch.window(ch.windows, key)
	if win.count(now) >= ch.cfg.RatePerMinute {
		ch.stats.Throttled++
		return ch.throttle(key, http.StatusTooManyRequests, win.nextFree(now), now), key
	}
	win.add(now)
	ch.stats.Reads++
	st := models.ARIState{PropertyID: prop, Cells: []models.ARICell{}}
	for k, c := range ch.cells[prop] {
		if !k.date.Before(from) && !k.date.After(to) {
			st.Cells = append(st.Cells, c.cell)
		}
	}
	slices.SortFunc(st.Cells, func(a, b models.ARICell) int {
		if c := strings.Compare(a.RoomTypeCode, b.RoomTypeCode); c != 0 {
			return c
		}
		if c := strings.Compare(a.RatePlanCode, b.RatePlanCode); c != 0 {
			return c
		}
		return a.Date.Time().Compare(b.Date.Time())
	})
	return jsonReply(http.StatusOK, st), key
}

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

func (ch *channel) pruneIdem(now time.Time, ttl time.Duration) {
	n := 0
	for n < len(ch.idemOrder) && now.Sub(ch.idemOrder[n].at) >= ttl {
		e := ch.idemOrder[n]
		if ch.idem[e.key].at.Equal(e.at) {
			delete(ch.idem, e.key)
		}
		n++
	}
	if n > 0 {
		ch.idemOrder = append(ch.idemOrder[:0], ch.idemOrder[n:]...)
	}
}

// receive notes the newest version received per night and counts a push that carries
// an older one than a push before it.
func (ch *channel) receive(req models.ARIRequest) {
	stale := false
	for _, l := range req.Lines {
		if ch.receiveLine(req.PropertyID, req.Family, l) {
			stale = true
		}
	}
	if stale {
		ch.stats.StaleReceived++
	}
}

// receiveLine notes the newest version received for each night of l and reports
// whether l carries an older version than one already received for any of them.
func (ch *channel) receiveLine(property string, fam models.Family, l models.ARILine) bool {
	stale := false
	for d := l.From; !d.After(l.To); d = d.AddDays(1) {
		if !l.Covers(d) {
			continue // a day the line's days leave out
		}
		k := receivedKey{property: property, family: fam,
			cell: cellKey{room: l.RoomTypeCode, rate: l.RatePlanCode, date: d}}
		if v, ok := ch.received[k]; ok && l.Version < v {
			stale = true
			continue
		}
		ch.received[k] = l.Version
	}
	return stale
}

// apply writes every night of l whose stored version for the family is not newer,
// or, while a delayed push is decided, keeps l for its late apply.
func (ch *channel) apply(property string, fam models.Family, l models.ARILine) {
	if ch.deferred != nil {
		*ch.deferred = append(*ch.deferred, func(now time.Time) { ch.write(property, fam, l, true, now) })
		return
	}
	ch.write(property, fam, l, false, ch.clock())
}

// write writes l to the channel's state and its apply log. A late write is
// last-writer-wins: it overwrites a newer version too, counting it in
// OlderApplied; any other keeps the newer version (StaleOverwrites).
func (ch *channel) write(property string, fam models.Family, l models.ARILine, late bool, now time.Time) {
	if len(ch.applied) >= ch.maxLog {
		n := copy(ch.applied, ch.applied[len(ch.applied)-ch.maxLog+1:])
		ch.applied = ch.applied[:n]
	}
	ch.applied = append(ch.applied, ApplyRecord{At: now, Property: property, Family: fam,
		RoomTypeCode: l.RoomTypeCode, RatePlanCode: l.RatePlanCode, From: l.From, To: l.To, Version: l.Version, Days: l.Days, Late: late})
	cells := ch.cells[property]
	if cells == nil {
		cells = map[cellKey]*cellState{}
		ch.cells[property] = cells
	}
	for d := l.From; !d.After(l.To); d = d.AddDays(1) {
		if !l.Covers(d) {
			continue
		}
		k := cellKey{room: l.RoomTypeCode, rate: l.RatePlanCode, date: d}
		c := cells[k]
		if c == nil {
			c = &cellState{
				cell:     models.ARICell{RoomTypeCode: l.RoomTypeCode, RatePlanCode: l.RatePlanCode, Date: d},
				versions: map[models.Family]int64{},
			}
			cells[k] = c
		}
		if l.Version < c.versions[fam] {
			if !late {
				ch.stats.StaleOverwrites++
				continue
			}
			ch.stats.OlderApplied++
		}
		c.versions[fam] = l.Version
		c.cell.Version = 0
		for _, v := range c.versions {
			c.cell.Version = max(c.cell.Version, v)
		}
		set(&c.cell.Amount, l.Amount)
		if l.Currency != "" {
			c.cell.Currency = l.Currency
		}
		set(&c.cell.Inventory, l.Inventory)
		set(&c.cell.StopSell, l.StopSell)
		set(&c.cell.MinLOS, l.MinLOS)
		set(&c.cell.MaxLOS, l.MaxLOS)
		set(&c.cell.CTA, l.CTA)
		set(&c.cell.CTD, l.CTD)
		ch.stats.NightsApplied++
	}
}

// set copies a present optional value, so the cell never aliases request memory.
func set[T any](dst **T, src *T) {
	if src != nil {
		v := *src
		*dst = &v
	}
}

func errorReply(status int, code, msg string) reply {
	return jsonReply(status, models.ARIError{Error: code, Message: msg})
}

func jsonReply(status int, v any) reply {
	body, err := json.Marshal(v)
	if err != nil {
		// Every value passed here is a plain wire struct.
		body, status = []byte(`{"error":"server_error","message":"encode"}`), http.StatusInternalServerError
	}
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	return reply{status: status, header: h, body: append(body, '\n')}
}

func (r reply) clone() reply {
	return reply{status: r.status, header: r.header.Clone(), body: slices.Clone(r.body)}
}

func (r reply) write(w http.ResponseWriter) {
	for k, v := range r.header {
		w.Header()[k] = v
	}
	w.WriteHeader(r.status)
	_, _ = w.Write(r.body)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	jsonReply(status, v).write(w)
}
