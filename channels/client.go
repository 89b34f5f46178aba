package activities

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/paritysync/paritysync/models"
)

// TokenProvider hands out the channel bearer token. The client asks for it on every
// call, so a rotated or refreshed token is used at once and never sits in a request.
type TokenProvider interface {
	// Token is the current bearer token.
	Token(ctx context.Context) (string, error)
	// Refresh obtains a new token, after a 401.
	Refresh(ctx context.Context) error
}

// StaticToken is a TokenProvider that always returns token; Refresh does nothing.
func StaticToken(token string) TokenProvider { return staticToken(token) }

type staticToken string

func (t staticToken) Token(context.Context) (string, error) { return string(t), nil }
func (t staticToken) Refresh(context.Context) error         { return nil }

// Class is what a channel's answer means for the request: exactly one per push.
type Class string

// The classes of a push outcome.
const (
	// ClassCommitted: 2xx, every line applied; ConfirmationID is set.
	ClassCommitted Class = "committed"
	// ClassPartial: 207; Accepted lines applied, Failed lines not.
	ClassPartial Class = "partial"
	// ClassThrottled: 429, or 503 with a usable Retry-After; wait RetryAfter.
	ClassThrottled Class = "throttled"
	// ClassTransient: 408/425/5xx, network errors and timeouts; back off and retry.
	ClassTransient Class = "transient"
	// ClassAuthExpired: 401; refresh the credential once, then give up.
	ClassAuthExpired Class = "auth_expired"
	// ClassQuotaExhausted: 400 quota_exhausted; nothing more today.
	ClassQuotaExhausted Class = "quota_exhausted"
	// ClassRejected: any other answer; retrying cannot help.
	ClassRejected Class = "rejected"
)

// LineFailure is one line a channel refused in a 207 answer.
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
	// Failed are the lines a 207 refused.
	Failed []LineFailure
	// RetryAfter is the capped Retry-After wait when ServerWait is true.
	RetryAfter time.Duration
	// ServerWait is true when the answer carried a usable Retry-After.
	ServerWait bool
	// RateLimit is the budget the answer reported, when HasRateLimit.
	RateLimit    RateLimit
	HasRateLimit bool
	// Message explains a non-committed answer: the channel's message or the
	// network error. It never contains the token.
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

// maxResponseBytes bounds what is read of an answer; a channel's answers are small.
const maxResponseBytes = 4 << 20

// maxMessageLen bounds a channel message copied into a PushResponse or an error.
const maxMessageLen = 300

// defaultMaxRetryAfter caps Retry-After for a channel configured without a cap.
const defaultMaxRetryAfter = 5 * time.Minute

// ChannelClient speaks the channel wire contract over a shared *http.Client.
type ChannelClient struct {
	hc       *http.Client
	baseURL  string
	tokens   TokenProvider
	channels map[string]models.ChannelConfig
	timeout  time.Duration
	now      func() time.Time
}

// NewChannelClient builds a client for the given channels under baseURL; timeout
// bounds each call (0 leaves it to ctx and hc).
func NewChannelClient(hc *http.Client, baseURL string, tokens TokenProvider, channels []models.ChannelConfig, timeout time.Duration) *ChannelClient {
	if hc == nil {
		hc = http.DefaultClient
	}
	byslug := make(map[string]models.ChannelConfig, len(channels))
	for _, c := range channels {
		byslug[c.Slug] = c
	}
	return &ChannelClient{hc: hc, baseURL: strings.TrimSuffix(baseURL, "/"), tokens: tokens,
		channels: byslug, timeout: timeout, now: time.Now}
}

// Push sends req and classifies the answer. It makes exactly one HTTP call, so one
// limiter token pays for it; on ClassAuthExpired the caller refreshes the token and
// pushes again. The error is only for what is not a channel answer: an unknown
// channel, an unencodable request, no token, or ctx itself ending.
func (c *ChannelClient) Push(ctx context.Context, req models.ChannelRequest) (PushResponse, error) {
	cfg, ok := c.channels[req.Channel]
	if !ok {
		return PushResponse{}, fmt.Errorf("push: unknown channel %q", req.Channel)
	}
	body, err := json.Marshal(req.Body())
	if err != nil {
		return PushResponse{}, fmt.Errorf("encode %s request: %w", req.Channel, err)
	}
	key := req.IdempotencyKey()
	corr := key
	for _, r := range req.Refs {
		if r.CorrelationID != "" {
			corr = r.CorrelationID
			break
		}
	}
	hdr := http.Header{}
	hdr.Set("Content-Type", "application/json")
	hdr.Set(models.HeaderIdempotencyKey, key)
	hdr.Set(models.HeaderCorrelationID, corr)
	return c.do(ctx, cfg, http.MethodPost, c.endpoint(cfg, nil), hdr, body)
}

// Fetch reads the cells a channel holds for a property from from to to, inclusive.
// A non-200 answer is a *ChannelError carrying the classified response.
func (c *ChannelClient) Fetch(ctx context.Context, channel, propertyID string, from, to models.Date) (models.ARIState, error) {
	cfg, ok := c.channels[channel]
	if !ok {
		return models.ARIState{}, fmt.Errorf("fetch: unknown channel %q", channel)
	}
	q := url.Values{"property_id": {propertyID}, "from": {from.String()}, "to": {to.String()}}
	var st models.ARIState
	resp, err := c.doDecode(ctx, cfg, http.MethodGet, c.endpoint(cfg, q), http.Header{}, nil, &st)
	if err != nil {
		return models.ARIState{}, fmt.Errorf("fetch %s state: %w", channel, err)
	}
	if resp.Status != http.StatusOK {
		return models.ARIState{}, &ChannelError{Op: "fetch " + channel + " state", Response: resp}
	}
	return st, nil
}

func (c *ChannelClient) endpoint(cfg models.ChannelConfig, q url.Values) string {
	base := cfg.BasePath
	if base == "" {
		base = "/" + cfg.Slug
	}
	u := c.baseURL + strings.TrimSuffix(base, "/") + "/ari"
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	return u
}

func (c *ChannelClient) do(ctx context.Context, cfg models.ChannelConfig, method, u string, hdr http.Header, body []byte) (PushResponse, error) {
	return c.doDecode(ctx, cfg, method, u, hdr, body, nil)
}

// doDecode makes one call and classifies it; a 200 body is decoded into into when
// into is not nil (an undecodable 200 then becomes ClassRejected).
func (c *ChannelClient) doDecode(ctx context.Context, cfg models.ChannelConfig, method, u string, hdr http.Header, body []byte, into any) (PushResponse, error) {
	token, err := c.tokens.Token(ctx)
	if err != nil {
		return PushResponse{}, fmt.Errorf("bearer token: %w", err)
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
		return PushResponse{}, fmt.Errorf("build request: %w", err)
	}
	hreq.Header = hdr
	hreq.Header.Set("Authorization", "Bearer "+token)
	hreq.Header.Set("Accept", "application/json")

	hresp, err := c.hc.Do(hreq)
	if err != nil {
		return c.networkFailure(ctx, err)
	}
	defer hresp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(hresp.Body, maxResponseBytes))
	if err != nil {
		// The status arrived but the body did not: as lost as a dropped connection.
		return c.networkFailure(ctx, err)
	}
	now := c.now()
	out := classify(hresp.StatusCode, hresp.Header, raw, now, maxRetryAfter(cfg))
	if into != nil && out.Class == ClassCommitted {
		if err := json.Unmarshal(raw, into); err != nil {
			out.Class, out.Message = ClassRejected, "undecodable answer: "+truncate(err.Error())
		}
	}
	return out, nil
}

// networkFailure is a call that got no complete answer. If the caller's own ctx
// ended, that is the caller's business, not the channel's.
func (c *ChannelClient) networkFailure(ctx context.Context, err error) (PushResponse, error) {
	if ctx.Err() != nil {
		return PushResponse{}, fmt.Errorf("channel call: %w", context.Cause(ctx))
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
	return PushResponse{Class: ClassTransient, Message: truncate(msg)}, nil
}

func maxRetryAfter(cfg models.ChannelConfig) time.Duration {
	if cfg.MaxRetryAfter > 0 {
		return cfg.MaxRetryAfter
	}
	return defaultMaxRetryAfter
}

// classify maps one HTTP answer to its outcome class.
func classify(status int, h http.Header, raw []byte, now time.Time, maxWait time.Duration) PushResponse {
	out := PushResponse{Status: status}
	out.RateLimit, out.HasRateLimit = ParseRateLimit(h, now)
	if v := h.Get(models.HeaderRetryAfter); v != "" {
		out.RetryAfter, out.ServerWait = ParseRetryAfter(v, now, maxWait)
	}
	var apiErr models.ARIError
	_ = json.Unmarshal(raw, &apiErr) // absent or foreign bodies just leave it empty
	out.Message = channelMessage(status, apiErr, raw)

	switch {
	case status == http.StatusMultiStatus:
		var p models.ARIPartial
		if err := json.Unmarshal(raw, &p); err != nil || len(p.Results) == 0 {
			// Which lines applied is unknown; a retry under the same idempotency
			// key is safe and may get a readable answer.
			out.Class, out.Message = ClassTransient, "unreadable 207 answer"
			return out
		}
		out.Class, out.ConfirmationID, out.Message = ClassPartial, p.ConfirmationID, ""
		if out.ConfirmationID == "" {
			out.ConfirmationID = h.Get(models.HeaderConfirmationID)
		}
		for _, r := range p.Results {
			if r.Status == models.LineOK {
				out.Accepted++
			} else {
				out.Failed = append(out.Failed, LineFailure{Line: r.Line, Code: r.Code, Message: truncate(r.Message)})
			}
		}
	case status >= 200 && status < 300:
		var a models.ARIAccepted
		_ = json.Unmarshal(raw, &a) // the header alone is enough to confirm
		out.Class, out.ConfirmationID, out.Accepted, out.Message = ClassCommitted, a.ConfirmationID, a.Accepted, ""
		if out.ConfirmationID == "" {
			out.ConfirmationID = h.Get(models.HeaderConfirmationID)
		}
	case status == http.StatusTooManyRequests:
		out.Class = ClassThrottled
	case status == http.StatusServiceUnavailable && out.ServerWait:
		out.Class = ClassThrottled
	case status == http.StatusRequestTimeout, status == http.StatusTooEarly, status >= 500:
		out.Class = ClassTransient
	case status == http.StatusUnauthorized:
		out.Class = ClassAuthExpired
	case status == http.StatusBadRequest && apiErr.Error == models.ErrorQuotaExhausted:
		out.Class = ClassQuotaExhausted
	default:
		out.Class = ClassRejected
	}
	if out.Class != ClassThrottled && out.Class != ClassTransient {
		// A wait only means something on an answer the caller will retry.
		out.RetryAfter, out.ServerWait = 0, false
	}
	return out
}

// channelMessage is the channel's own explanation, or the start of its body.
func channelMessage(status int, e models.ARIError, raw []byte) string {
	switch {
	case e.Message != "" && e.Error != "":
		return truncate(e.Error + ": " + e.Message)
	case e.Message != "":
		return truncate(e.Message)
	case e.Error != "":
		return e.Error
	case len(bytes.TrimSpace(raw)) > 0:
		return truncate(strings.TrimSpace(string(raw)))
	}
	return http.StatusText(status)
}

func truncate(s string) string {
	if len(s) <= maxMessageLen {
		return s
	}
	return strings.ToValidUTF8(s[:maxMessageLen], "") + "…"
}
