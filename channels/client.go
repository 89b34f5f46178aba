// Package channels speaks each channel's wire protocol — the generic paritysync JSON
// contract, the Channex JSON API and the OpenTravel 2003/05 XML notifications —
// behind one Client: a models.ChannelRequest goes in, a classified PushResponse comes
// out. Encoding, authentication, classification (including errors inside a 200
// body), read-back, Retry-After and rate-limit headers live here; activities/ is the
// Temporal glue around it.
package channels

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/paritysync/paritysync/models"
)

// Class is what a channel's answer means for the request: exactly one per push.
type Class string

// The classes of a push outcome.
const (
	// ClassCommitted: every line applied; ConfirmationID is set.
	ClassCommitted Class = "committed"
	// ClassPartial: Accepted lines applied, Failed lines not (207, Channex
	// meta.warnings, OpenTravel <Warnings>).
	ClassPartial Class = "partial"
	// ClassThrottled: 429, or 503 with a usable Retry-After; wait RetryAfter.
	ClassThrottled Class = "throttled"
	// ClassTransient: 408/425/5xx, network errors, timeouts, unreadable answers and
	// OpenTravel processing errors; back off and retry.
	ClassTransient Class = "transient"
	// ClassAuthExpired: 401 or an OpenTravel authentication error; refresh the
	// credential once, then give up.
	ClassAuthExpired Class = "auth_expired"
	// ClassQuotaExhausted: 400 quota_exhausted; nothing more today.
	ClassQuotaExhausted Class = "quota_exhausted"
	// ClassRejected: any other answer, or a request the protocol cannot carry;
	// retrying cannot help.
	ClassRejected Class = "rejected"
)

// LineFailure is one request line a channel refused in a partial answer.
type LineFailure struct {
	Line    int
	Code    string
	Message string
}

// PushResponse is a channel's answer to one push, classified.
type PushResponse struct {
	Class  Class
	Status int // 0 when no HTTP answer arrived
	// ConfirmationID is the channel's reference for a committed or partial push.
	ConfirmationID string
	// Accepted is the number of lines the channel applied.
	Accepted int
	// Failed are the lines a partial answer refused.
	Failed []LineFailure
	// RetryAfter is the capped Retry-After wait when ServerWait is true.
	RetryAfter time.Duration
	// ServerWait is true when the answer carried a usable Retry-After.
	ServerWait bool
	// RateLimit is the budget the answer reported, when HasRateLimit.
	RateLimit    RateLimit
	HasRateLimit bool
	// Message explains a non-committed answer: the channel's message or the
	// network error. It never contains the credential.
	Message string
}

// ChannelError is a channel answer to a read that was not a success; Response says
// how to treat it (wait, refresh, give up).
type ChannelError struct {
	Op       string
	Response PushResponse
}

func (e *ChannelError) Error() string {
	if e.Response.Status == 0 {
		return fmt.Sprintf("%s: %s: %s", e.Op, e.Response.Class, e.Response.Message)
	}
	return fmt.Sprintf("%s: HTTP %d %s: %s", e.Op, e.Response.Status, e.Response.Class, e.Response.Message)
}

// ErrNoReadBack is returned by ReadBack for a channel whose protocol cannot read its
// state back; reconciliation re-sends such a channel's state instead.
var ErrNoReadBack = errors.New("protocol has no read-back")

// maxResponseBytes bounds what is read of an answer; a channel's answers are small
// except read-backs, which stay well under this.
const maxResponseBytes = 8 << 20

// maxMessageLen bounds a channel message copied into a PushResponse or an error.
const maxMessageLen = 300

// defaultMaxRetryAfter caps Retry-After for a channel configured without a cap.
const defaultMaxRetryAfter = 5 * time.Minute

// Client speaks every configured channel's protocol over a shared *http.Client.
type Client struct {
	hc       *http.Client
	creds    Credentials
	channels map[string]channel
	timeout  time.Duration
	now      func() time.Time
	// configs, when set, is the channels' effective configuration (the codes
	// stored over the API laid over the YAML's), read at each call.
	configs func(ctx context.Context, channel, property string) (models.ChannelConfig, error)
}

// UseConfigs makes the client read each Channex and OpenTravel channel's mapping from f (the
// channel's configuration for a property) at every push and read-back instead of
// the configuration it was built with, so a property mapped after the start is
// pushed without a restart. f answers from a cache (store.Mappings.ChannelFor);
// its error fails the call (nothing is sent).
func (c *Client) UseConfigs(f func(ctx context.Context, channel, property string) (models.ChannelConfig, error)) {
	c.configs = f
}

// current is ch with its mapping of property as configured now.
func (c *Client) current(ctx context.Context, ch channel, property string) (channel, error) {
	if c.configs == nil || ch.cfg.Protocol != models.ProtocolChannex && ch.cfg.Protocol != models.ProtocolOpenTravel {
		return ch, nil
	}
	cfg, err := c.configs(ctx, ch.cfg.Slug, property)
	if err != nil {
		return ch, fmt.Errorf("mappings of %s: %w", ch.cfg.Slug, err)
	}
	if cfg.Slug == ch.cfg.Slug {
		ch.cfg.Channex, ch.cfg.OpenTravel = cfg.Channex, cfg.OpenTravel
	}
	return ch, nil
}

// Timeout is the longest one channel call takes (PARITYSYNC_HTTP_TIMEOUT).
func (c *Client) Timeout() time.Duration { return c.timeout }

// channel is a configured channel with its protocol and the URL its paths hang off.
type channel struct {
	cfg   models.ChannelConfig
	proto protocol
	base  string
}

// call is one HTTP request a protocol built for a push.
type call struct {
	method      string
	path        string // under the channel's base
	contentType string
	body        []byte
	// units maps each unit of the body the channel reports on (change object, OTA
	// message) to the request line it carries; nil when units are lines.
	units []int
	// versions is the version of each unit, for HeaderUnitVersions.
	versions []int64
	lines    int
	// echo is what an answer must carry back to be this call's answer, when the
	// protocol echoes (OpenTravel's EchoToken).
	echo string
}

// line is the request line that unit i carries.
func (c call) line(i int) int {
	if c.units == nil {
		return i
	}
	return c.units[i]
}

// nUnits is the number of units in the body.
func (c call) nUnits() int {
	if c.units == nil {
		return c.lines
	}
	return len(c.units)
}

// protocol is one wire protocol.
type protocol interface {
	// encode builds the call that carries req; an error means the request cannot
	// be carried (an unmapped code), which no retry can change.
	encode(cfg models.ChannelConfig, req models.ChannelRequest, now time.Time) (call, error)
	// authorize puts the secret where the protocol wants it.
	authorize(h http.Header, secret string)
	// interpret sets out's Class and what the answer's body says. Status,
	// Retry-After and rate-limit headers are already in out.
	interpret(out *PushResponse, c call, h http.Header, raw []byte)
	// readBack reads a property's cells from..to, or returns ErrNoReadBack.
	readBack(ctx context.Context, r reader, property string, from, to models.Date) (models.ARIState, error)
}

// reader is what readBack uses to GET from its channel.
type reader struct {
	c  *Client
	ch channel
}

// get fetches path?q and hands a 2xx body to decode; any other answer is a
// *ChannelError.
func (r reader) get(ctx context.Context, op, path string, q url.Values, decode func([]byte) error) error {
	u := r.ch.base + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	a, failed, err := r.c.roundTrip(ctx, r.ch, http.MethodGet, u, http.Header{}, nil)
	if err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	if failed != nil {
		return &ChannelError{Op: op, Response: *failed}
	}
	if a.status < 200 || a.status > 299 {
		return &ChannelError{Op: op, Response: r.c.classify(r.ch, call{}, a)}
	}
	if err := decode(a.body); err != nil {
		return &ChannelError{Op: op, Response: PushResponse{Class: ClassRejected, Status: a.status,
			Message: "undecodable answer: " + truncate(err.Error())}}
	}
	return nil
}

// New builds a client for channels. A channel's requests go to its BaseURL, or to
// baseURL, followed by its BasePath; timeout bounds each call (0 leaves it to ctx
// and hc). creds must hold a credential for every channel.
func New(hc *http.Client, baseURL string, creds Credentials, channels []models.ChannelConfig, timeout time.Duration) *Client {
	if hc == nil {
		hc = http.DefaultClient
	}
	byslug := make(map[string]channel, len(channels))
	for _, cfg := range channels {
		base := cfg.BaseURL
		if base == "" {
			base = baseURL
		}
		byslug[cfg.Slug] = channel{cfg: cfg, proto: protocolOf(cfg.Protocol),
			base: strings.TrimSuffix(base, "/") + strings.TrimSuffix(cfg.BasePath, "/")}
	}
	return &Client{hc: hc, creds: creds, channels: byslug, timeout: timeout, now: time.Now}
}

func protocolOf(p models.Protocol) protocol {
	switch p {
	case models.ProtocolChannex:
		return channex{}
	case models.ProtocolOpenTravel:
		return openTravel{}
	}
	return paritySync{}
}

// Push sends req in its channel's protocol and classifies the answer. It makes
// exactly one HTTP call (none when the protocol cannot carry req: ClassRejected), so
// one limiter token pays for it; on ClassAuthExpired the caller refreshes the
// credential and pushes again. The error is only for what is not a channel answer:
// an unknown channel, no credential, or ctx itself ending.
func (c *Client) Push(ctx context.Context, req models.ChannelRequest) (PushResponse, error) {
	ch, ok := c.channels[req.Channel]
	if !ok {
		return PushResponse{}, fmt.Errorf("push: unknown channel %q", req.Channel)
	}
	ch, err := c.current(ctx, ch, req.PropertyID)
	if err != nil {
		return PushResponse{}, fmt.Errorf("push: %w", err)
	}
	cl, err := ch.proto.encode(ch.cfg, req, c.now())
	if err != nil {
		return PushResponse{Class: ClassRejected, Message: truncate(err.Error())}, nil
	}
	cl.lines = len(req.Lines)
	key := req.IdempotencyKey()
	corr := key
	for _, r := range req.Refs {
		if r.CorrelationID != "" {
			corr = r.CorrelationID
			break
		}
	}
	hdr := http.Header{}
	hdr.Set("Content-Type", cl.contentType)
	hdr.Set(models.HeaderIdempotencyKey, key)
	hdr.Set(models.HeaderCorrelationID, corr)
	if len(cl.versions) > 0 {
		vs := make([]string, len(cl.versions))
		for i, v := range cl.versions {
			vs[i] = strconv.FormatInt(v, 10)
		}
		hdr.Set(models.HeaderUnitVersions, strings.Join(vs, ","))
	}
	a, failed, err := c.roundTrip(ctx, ch, cl.method, ch.base+cl.path, hdr, cl.body)
	if err != nil {
		return PushResponse{}, err
	}
	if failed != nil {
		return *failed, nil
	}
	return c.classify(ch, cl, a), nil
}

// ReadBack reads the cells a channel holds for a property from from to to,
// inclusive, in paritysync's codes. A channel whose protocol has no read-back gives
// ErrNoReadBack; a non-2xx answer is a *ChannelError carrying the classified
// response.
func (c *Client) ReadBack(ctx context.Context, channelSlug, propertyID string, from, to models.Date) (models.ARIState, error) {
	ch, ok := c.channels[channelSlug]
	if !ok {
		return models.ARIState{}, fmt.Errorf("read back: unknown channel %q", channelSlug)
	}
	ch, err := c.current(ctx, ch, propertyID)
	if err != nil {
		return models.ARIState{}, fmt.Errorf("read back: %w", err)
	}
	// The protocol's errors already name the channel and what was read.
	return ch.proto.readBack(ctx, reader{c: c, ch: ch}, propertyID, from, to)
}

// answer is one HTTP response, read whole.
type answer struct {
	status int
	header http.Header
	body   []byte
	at     time.Time
	// secrets are the forms of the credential the call carried, scrubbed from any
	// message built from the body: a proxy page may echo the request's headers.
	secrets []string
}

// roundTrip makes one authorized call. A call that got no complete answer comes
// back as a classified failure; err is only for no credential or ctx ending.
func (c *Client) roundTrip(ctx context.Context, ch channel, method, u string, hdr http.Header, body []byte) (answer, *PushResponse, error) {
	secret, err := c.creds.Secret(ctx, ch.cfg.Slug)
	if err != nil {
		return answer{}, nil, fmt.Errorf("credential: %w", err)
	}
	callCtx, cancel := ctx, context.CancelFunc(func() {})
	if c.timeout > 0 {
		callCtx, cancel = context.WithTimeout(ctx, c.timeout)
	}
	defer cancel()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	hreq, err := http.NewRequestWithContext(callCtx, method, u, rd)
	if err != nil {
		return answer{}, nil, fmt.Errorf("build request: %w", err)
	}
	hreq.Header = hdr
	ch.proto.authorize(hreq.Header, secret)

	hresp, err := c.hc.Do(hreq)
	if err != nil {
		f, err := c.networkFailure(ctx, err)
		return answer{}, f, err
	}
	defer hresp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(hresp.Body, maxResponseBytes))
	if err != nil {
		// The status arrived but the body did not: as lost as a dropped connection.
		f, err := c.networkFailure(ctx, err)
		return answer{}, f, err
	}
	a := answer{status: hresp.StatusCode, header: hresp.Header, body: raw, at: c.now()}
	if secret != "" {
		a.secrets = secretForms(secret, hreq.Header)
	}
	return a, nil, nil
}

// networkFailure is a call that got no complete answer. If the caller's own ctx
// ended, that is the caller's business, not the channel's.
func (c *Client) networkFailure(ctx context.Context, err error) (*PushResponse, error) {
	if ctx.Err() != nil {
		return nil, fmt.Errorf("channel call: %w", context.Cause(ctx))
	}
	msg := err.Error()
	if errors.Is(err, context.DeadlineExceeded) {
		msg = fmt.Sprintf("no answer within %s", c.timeout)
	} else {
		var uerr *url.Error
		if errors.As(err, &uerr) {
			// The URL holds no secret, but the inner error is the useful part.
			msg = uerr.Err.Error()
		}
	}
	return &PushResponse{Class: ClassTransient, Message: truncate(msg)}, nil
}

// classify reads the headers every protocol shares, lets the protocol read the
// body, and drops a wait from an answer that will not be retried.
func (c *Client) classify(ch channel, cl call, a answer) PushResponse {
	out := PushResponse{Status: a.status}
	// A time the channel announces is on its clock: measured against its Date, a
	// channel whose clock is behind ours is not called before its time.
	now := ChannelNow(a.header, a.at)
	out.RateLimit, out.HasRateLimit = ParseRateLimit(a.header, now)
	if v := a.header.Get(models.HeaderRetryAfter); v != "" {
		out.RetryAfter, out.ServerWait = ParseRetryAfter(v, now, maxRetryAfter(ch.cfg))
	}
	// Scrubbed before it is read, so no message cut from it can hold part of the
	// credential.
	ch.proto.interpret(&out, cl, a.header, scrub(a.body, a.secrets))
	if out.Class != ClassThrottled && out.Class != ClassTransient {
		out.RetryAfter, out.ServerWait = 0, false
	}
	if out.Class == ClassCommitted || out.Class == ClassPartial {
		out.Message = ""
	}
	return out
}

// secretForms are the ways the credential may appear in an echo of the request:
// itself, the password of a user:password, and what the Authorization header
// carries after its scheme (base64 for Basic).
func secretForms(secret string, h http.Header) []string {
	forms := []string{secret}
	if _, pass, ok := strings.Cut(secret, ":"); ok && pass != "" {
		forms = append(forms, pass)
	}
	if _, cred, ok := strings.Cut(h.Get("Authorization"), " "); ok && cred != "" {
		forms = append(forms, cred)
	}
	return forms
}

// scrub replaces every form of the credential in a body the channel wrote.
func scrub(body []byte, secrets []string) []byte {
	for _, s := range secrets {
		body = bytes.ReplaceAll(body, []byte(s), []byte("[redacted]"))
	}
	return body
}

// byStatus is the class of a non-2xx answer that no protocol-specific body changes.
func byStatus(status int, serverWait bool) Class {
	switch {
	case status == http.StatusTooManyRequests:
		return ClassThrottled
	case status == http.StatusServiceUnavailable && serverWait:
		return ClassThrottled
	case status == http.StatusRequestTimeout, status == http.StatusTooEarly, status >= 500:
		return ClassTransient
	case status == http.StatusUnauthorized:
		return ClassAuthExpired
	}
	return ClassRejected
}

func is2xx(status int) bool { return status >= 200 && status <= 299 }

func maxRetryAfter(cfg models.ChannelConfig) time.Duration {
	if cfg.MaxRetryAfter > 0 {
		return cfg.MaxRetryAfter
	}
	return defaultMaxRetryAfter
}

// bodyText is the start of a body the protocol could not read, or the status text.
func bodyText(status int, raw []byte) string {
	if t := bytes.TrimSpace(raw); len(t) > 0 {
		return truncate(string(t))
	}
	return http.StatusText(status)
}

// errEmptyAnswer is a 2xx without a body, which confirms nothing.
var errEmptyAnswer = errors.New("empty answer")

// jsonObject checks that raw is one whole JSON object: an empty, truncated or HTML
// body, or a bare value, is not an answer a protocol can read acceptance from.
func jsonObject(raw []byte) error {
	t := bytes.TrimSpace(raw)
	switch {
	case len(t) == 0:
		return errEmptyAnswer
	case !json.Valid(t):
		return errors.New("not JSON")
	case t[0] != '{':
		return errors.New("not a JSON object")
	}
	return nil
}

// unreadable explains an answer that could not be read, with the start of its body
// so the channel's own words reach the operator.
func unreadable(err error, raw []byte) string {
	if errors.Is(err, errEmptyAnswer) {
		return "unreadable answer: empty body"
	}
	return truncate("unreadable answer: " + err.Error() + ": " + strings.TrimSpace(string(raw)))
}

func truncate(s string) string {
	if len(s) <= maxMessageLen {
		return s
	}
	return strings.ToValidUTF8(s[:maxMessageLen], "") + "…"
}

// dateRange is a line's dates as a protocol with a single-day form wants them.
func dateRange(l models.ARILine) (date, from, to models.Date) {
	if l.From == l.To {
		return l.From, models.Date{}, models.Date{}
	}
	return models.Date{}, l.From, l.To
}
