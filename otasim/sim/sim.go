package sim

import (
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/paritysync/paritysync/models"
)

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
