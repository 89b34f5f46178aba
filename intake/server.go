package main

import (
	"cmp"
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"
	"go.temporal.io/sdk/client"

	"github.com/paritysync/paritysync/activities/store"
	"github.com/paritysync/paritysync/config"
	"github.com/paritysync/paritysync/limiter"
	"github.com/paritysync/paritysync/models"
	"github.com/paritysync/paritysync/ops"
)

//go:embed openapi.yaml
var openAPIDocument []byte

// Limits of the API; Config overrides them.
const (
	DefaultMaxBatchBody  = 32 << 20
	DefaultMaxChangeBody = 1 << 20
	// DefaultMaxChanges bounds one webhook post: the smoother takes at most this
	// many in one update.
	DefaultMaxChanges = models.MaxInlineMutations
)

// Config is what the server needs besides its connections.
type Config struct {
	Settings       config.Settings
	Channels       []models.ChannelConfig
	MaxBatchBody   int64
	MaxChangeBody  int64
	MaxChanges     int
	MaxBatchRows   int
	RequestTimeout time.Duration
	// SubmitTimeout bounds the wait for a smoother to take a webhook post's
	// changes; past it they are refused with Retry-After.
	SubmitTimeout time.Duration
	// CancelWait is how long DELETE /v1/batches/{id} waits for a cancelled batch
	// to close its outcomes before it answers 202 with the status URL.
	CancelWait time.Duration
	// SmootherMaxPending is the admission limit of the smoothers intake starts
	// (PARITYSYNC_SMOOTHER_MAX_PENDING); a smoother already running keeps its own.
	SmootherMaxPending int
	// SubmitLinger is how long an idle channel submitter waits for more posts
	// before it sends an update (PARITYSYNC_SUBMIT_LINGER; 0 by default).
	SubmitLinger time.Duration
	// BodyGrace, BodyMinRate (bytes/s) and BodyMaxTime pace a request body; see
	// DefaultBodyGrace.
	BodyGrace   time.Duration
	BodyMinRate int64
	BodyMaxTime time.Duration
	// Callbacks are the tenants' callback secrets and allow-lists
	// (PARITYSYNC_CALLBACKS_FILE); nil allows no callback_url. CallbackPoll and
	// CallbackBackoff pace the delivery loop (DefaultCallbackPoll,
	// DefaultCallbackBackoff when 0).
	Callbacks       *callbackConfig
	CallbackPoll    time.Duration
	CallbackBackoff time.Duration
	// BatchSweep is how often each running batch is described to find the ends no
	// FinishBatch recorded (terminated, failed, timed out); DefaultBatchSweep when
	// 0. See sweep.go.
	BatchSweep time.Duration
}

// Server is the PMS-facing HTTP API.
type Server struct {
	cfg       Config
	tc        client.Client
	rdb       redis.UniversalClient
	st        *store.Store
	lim       *limiter.Limiter
	keys      *keyring
	validator *models.Validator
	channels  map[string]models.ChannelConfig
	// mappings lays the codes stored over the API over the YAML's channels; nil
	// without a store.
	mappings *store.Mappings
	log      *slog.Logger
	now      func() time.Time
	metrics  *serverMetrics
	registry *prometheus.Registry

	// submitters are the channels' group commits into their smoothers, started
	// on a channel's first post and stopped by Close.
	subMu      sync.Mutex
	submitters map[string]*submitter
	subCtx     context.Context
	subStop    context.CancelFunc
	subWG      sync.WaitGroup
}

// NewServer wires the API over its connections.
func NewServer(cfg Config, tc client.Client, rdb redis.UniversalClient, st *store.Store, keys *keyring, log *slog.Logger) (*Server, error) {
	orDefault(&cfg.MaxBatchBody, DefaultMaxBatchBody)
	orDefault(&cfg.MaxChangeBody, DefaultMaxChangeBody)
	orDefault(&cfg.MaxChanges, DefaultMaxChanges)
	orDefault(&cfg.RequestTimeout, 30*time.Second)
	if cfg.CancelWait <= 0 || cfg.CancelWait > cfg.RequestTimeout/2 {
		cfg.CancelWait = cfg.RequestTimeout / 2
	}
	if cfg.SubmitTimeout <= 0 || cfg.SubmitTimeout > cfg.RequestTimeout/2 {
		cfg.SubmitTimeout = cfg.RequestTimeout / 3
	}
	orDefault(&cfg.BodyGrace, DefaultBodyGrace)
	orDefault(&cfg.BodyMinRate, DefaultBodyMinRate)
	orDefault(&cfg.BodyMaxTime, DefaultBodyMaxTime)
	orDefault(&cfg.SmootherMaxPending, models.DefaultMaxPending)
	v, err := ops.NewValidator(cfg.Settings, cfg.Channels)
	if err != nil {
		return nil, err
	}
	reg := prometheus.NewRegistry()
	s := &Server{cfg: cfg, tc: tc, rdb: rdb, st: st, keys: keys, validator: v,
		lim:      limiter.New(rdb, cfg.Channels, limiter.Options{Prefix: cfg.Settings.KeyPrefix, Zones: cfg.Settings.Zones}),
		channels: models.ChannelMap(cfg.Channels), log: log, now: time.Now,
		metrics: newServerMetrics(reg), registry: reg, submitters: map[string]*submitter{}}
	s.subCtx, s.subStop = context.WithCancel(context.Background())
	if s.cfg.Callbacks == nil {
		s.cfg.Callbacks = &callbackConfig{tenants: map[string]callbackTenant{}}
	}
	if st != nil {
		s.mappings = st.NewMappings(cfg.Channels, store.DefaultMappingsTTL)
		// Every intake delivers: the claim holds an event for one of them at a time.
		d := newCallbackDeliverer(s.cfg.Callbacks, st, cfg.CallbackPoll, cfg.CallbackBackoff, log)
		s.subWG.Add(1)
		go func() {
			defer s.subWG.Done()
			d.run(s.subCtx)
		}()
		if tc != nil {
			sw := &batchSweeper{tc: tc, st: st, every: cmp.Or(cfg.BatchSweep, DefaultBatchSweep), log: log}
			s.subWG.Add(1)
			go func() {
				defer s.subWG.Done()
				sw.run(s.subCtx)
			}()
		}
	}
	return s, nil
}

// orDefault sets *v to def when it is not positive (unset).
func orDefault[T int | int64 | time.Duration](v *T, def T) {
	if *v <= 0 {
		*v = def
	}
}

// checker is the validator with the channels' codes as stored now for ms (a
// property mapped over the API a moment ago is not refused as unmapped), and the
// channels.
func (s *Server) checker(ctx context.Context, ms []models.Mutation) (*models.Validator, map[string]models.ChannelConfig, error) {
	if s.mappings == nil {
		return s.validator, s.channels, nil
	}
	v, err := s.mappings.ValidatorFor(ctx, s.validator, ms)
	return v, v.Channels, err
}

// Close stops the channel submitters, the callback delivery loop and the batch sweeper; a post still waiting in one is answered as
// if its smoother were busy. Call it once the HTTP server has shut down.
func (s *Server) Close() {
	s.subStop()
	s.subWG.Wait()
}

// submitterFor is channel's submitter, started on first use.
func (s *Server) submitterFor(channel string) *submitter {
	s.subMu.Lock()
	defer s.subMu.Unlock()
	if sub, ok := s.submitters[channel]; ok {
		return sub
	}
	sub := newSubmitter(s.tc, s.st, s.cfg.Settings.TaskQueue,
		models.SmootherInput{Channel: channel, MaxPending: s.cfg.SmootherMaxPending},
		submitterConfig{channel: s.channels[channel], maxGroup: models.MaxInlineMutations,
			linger: s.cfg.SubmitLinger, timeout: s.cfg.SubmitTimeout}, s.metrics)
	s.submitters[channel] = sub
	s.subWG.Add(1)
	go func() {
		defer s.subWG.Done()
		sub.run(s.subCtx)
	}()
	return sub
}

// Handler is every route of the API.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	authed := func(pattern string, h http.HandlerFunc) {
		mux.Handle(pattern, s.keys.authenticate(h))
	}
	authed("POST /v1/batches", s.postBatch)
	authed("GET /v1/batches", s.listBatches)
	authed("GET /v1/batches/{id}", s.getBatch)
	authed("DELETE /v1/batches/{id}", s.deleteBatch)
	authed("GET /v1/batches/{id}/rejections", s.getRejections)
	authed("GET /v1/batches/{id}/outcomes", s.getOutcomes)
	authed("POST /v1/changes", s.postChanges)
	authed("GET /v1/changes/{id}", s.getChange)
	authed("POST /v1/channels/{channel}/pause", adminOnly(s.pauseChannel))
	authed("POST /v1/channels/{channel}/resume", adminOnly(s.resumeChannel))
	authed("GET /v1/quota", s.getQuota)
	authed("GET /v1/lag", s.getLag)
	authed("GET /v1/dlq", adminOnly(s.getDLQ))
	authed("POST /v1/dlq/replay", adminOnly(s.replayDLQ))
	authed("GET /v1/dlq/export", adminOnly(s.exportDLQ))
	authed("GET /v1/properties/{id}/channels", adminOnly(s.getPropertyChannels))
	authed("PUT /v1/properties/{id}/channels", adminOnly(s.putPropertyChannels))
	authed("POST /v1/dlq/ack", adminOnly(s.ackDLQ))
	mux.HandleFunc("GET /openapi.yaml", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/yaml")
		_, _ = w.Write(openAPIDocument)
	})
	mutationSchema := models.MutationSchema()
	mux.HandleFunc("GET /v1/schemas/mutation.json", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/schema+json")
		_, _ = w.Write(mutationSchema)
	})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("GET /readyz", s.ready)
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeProblem(w, r, http.StatusNotFound, probNotFound, "no route "+r.Method+" "+r.URL.Path+" (see /openapi.yaml)")
	})
	return s.observe(mux)
}

// ready answers 200 when Temporal, Redis and PostgreSQL answer, 503 naming the
// first that does not.
func (s *Server) ready(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 3*time.Second)
	defer cancel()
	checks := []struct {
		name string
		fn   func(context.Context) error
	}{
		{"temporal", func(ctx context.Context) error {
			_, err := s.tc.CheckHealth(ctx, &client.CheckHealthRequest{})
			return err
		}},
		{"redis", func(ctx context.Context) error { return s.rdb.Ping(ctx).Err() }},
		{"postgres", s.st.Ping},
	}
	for _, c := range checks {
		if err := c.fn(ctx); err != nil {
			writeProblem(w, r, http.StatusServiceUnavailable, probUnavailable, c.name+" unreachable: "+err.Error())
			return
		}
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
}

// Pace of a request body: it must start within BodyGrace and then arrive at
// BodyMinRate on average, so a client that trickles its declared body holds a
// connection for BodyGrace, not for the server's whole ReadTimeout; BodyMaxTime
// caps the read whatever the pace (a 32 MiB batch at 64 KiB/s would need 8 min).
const (
	DefaultBodyGrace   = 10 * time.Second
	DefaultBodyMinRate = 64 << 10 // bytes per second
	DefaultBodyMaxTime = 2 * time.Minute
)

// bodyTypes are the media types a request body may declare: JSON, or JSON lines
// under either name in use. Parameters (charset=utf-8) are allowed.
var bodyTypes = []string{"application/json", "application/x-ndjson", "application/jsonl"}

// readBody reads at most limit bytes of the request body, at the pace the server
// asks for. A body that declares no JSON media type is answered 415 (a body
// without Content-Type too: curl -d sends a form's type, and a PMS that means
// JSON says so), a longer one 413, one too slow 408; then ok is false.
func (s *Server) readBody(w http.ResponseWriter, r *http.Request, limit int64) (body []byte, ok bool) {
	if r.ContentLength != 0 {
		mt, params, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
		if cs, set := params["charset"]; err != nil || !slices.Contains(bodyTypes, mt) || set && !strings.EqualFold(cs, "utf-8") {
			dropRest(w)
			writeProblem(w, r, http.StatusUnsupportedMediaType, probMediaType,
				"Content-Type must be application/json, application/x-ndjson or application/jsonl (UTF-8); got "+strconv.Quote(r.Header.Get("Content-Type")))
			return nil, false
		}
	}
	paced := &pacedBody{r: http.MaxBytesReader(w, r.Body, limit), rc: http.NewResponseController(w),
		start: time.Now(), grace: s.cfg.BodyGrace, rate: s.cfg.BodyMinRate}
	paced.end = paced.start.Add(s.cfg.BodyMaxTime)
	paced.extend()
	body, err := io.ReadAll(paced)
	if err == nil {
		// The rest of the request may take as long as the server allows; a
		// deadline left in the past would cancel its context.
		_ = paced.rc.SetReadDeadline(paced.end)
	}
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &tooBig):
		writeProblem(w, r, http.StatusRequestEntityTooLarge, probTooLarge,
			fmt.Sprintf("this endpoint takes at most %d bytes", limit))
		return nil, false
	case errors.Is(err, os.ErrDeadlineExceeded):
		dropRest(w)
		writeProblem(w, r, http.StatusRequestTimeout, probSlowBody,
			fmt.Sprintf("the body must start within %s and arrive at %d bytes/s or more; %d bytes came in %s",
				s.cfg.BodyGrace, s.cfg.BodyMinRate, paced.n, time.Since(paced.start).Round(time.Millisecond)))
		return nil, false
	case err != nil:
		writeProblem(w, r, http.StatusBadRequest, probUnreadable, "reading the body: "+err.Error())
		return nil, false
	}
	return body, true
}

// dropRest closes the connection after the answer without reading what is left
// of the body: the server would otherwise read up to 256 KiB more of it after the
// handler, at whatever pace the client keeps.
func dropRest(w http.ResponseWriter) {
	w.Header().Set("Connection", "close")
	_ = http.NewResponseController(w).SetReadDeadline(time.Now())
}

// pacedBody moves the connection's read deadline as the body arrives: start +
// grace + what came so far at rate, never past end. Setting a deadline is a
// timer reset, no system call.
type pacedBody struct {
	r     io.Reader
	rc    *http.ResponseController
	start time.Time
	grace time.Duration
	rate  int64
	end   time.Time
	n     int64
}

func (p *pacedBody) Read(b []byte) (int, error) {
	n, err := p.r.Read(b)
	p.n += int64(n)
	p.extend()
	return n, err
}

func (p *pacedBody) extend() {
	d := p.start.Add(p.grace + time.Duration(p.n*int64(time.Second)/p.rate))
	if d.After(p.end) {
		d = p.end
	}
	// Not supported by a test's ResponseRecorder; a real connection always is.
	_ = p.rc.SetReadDeadline(d)
}

// batchID names a tenant's batch: the tenant, a dot, and either a digest of the
// Idempotency-Key (the same key always names the same batch) or the time and a
// random suffix.
func batchID(tenant, idempotencyKey string, now time.Time, random string) string {
	if idempotencyKey != "" {
		sum := sha256.Sum256([]byte(tenant + "\x00" + idempotencyKey))
		return tenant + ".k" + hex.EncodeToString(sum[:12])
	}
	return ops.TimedBatchID(tenant+".", now, random)
}

// batchIDPattern is what a batch id may be: its tenant, a dot, and intake's own
// suffix (k<digest>, <time>-<random>, replay-…); at most 128 characters. A path id
// off it (a control character, a megabyte) is answered 404 before it reaches
// Temporal, which would refuse it.
var batchIDPattern = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,31}\.[A-Za-z0-9._:-]{1,95}$`)

// ownBatch is the batch id of the path if it is the tenant's; otherwise it answers
// 404 (another tenant's batch is not even said to exist).
func ownBatch(w http.ResponseWriter, r *http.Request) (string, bool) {
	id := r.PathValue("id")
	if !batchIDPattern.MatchString(id) {
		writeProblem(w, r, http.StatusNotFound, probNotFound, "no such batch: a batch id is <tenant>.<suffix> of at most 128 characters of [A-Za-z0-9._:-]")
		return "", false
	}
	if !strings.HasPrefix(id, tenantOf(r.Context())+".") {
		writeProblem(w, r, http.StatusNotFound, probNotFound, "no batch "+id)
		return "", false
	}
	setLogBatch(r, id)
	return id, true
}

// idempotencyKeyPattern is what an Idempotency-Key may be: 1-255 visible ASCII
// characters (it is hashed into the batch id, and echoed in answers).
var idempotencyKeyPattern = regexp.MustCompile(`^[!-~]{1,255}$`)

// ruleIdempotencyKey is the rule of idempotencyKeyPattern.
const ruleIdempotencyKey = "must be 1-255 visible ASCII characters (no spaces or control characters)"

// uiLink is where the Temporal UI shows a workflow.
func (s *Server) uiLink(workflowID string) string {
	return ops.WorkflowLink(s.cfg.Settings, workflowID)
}
