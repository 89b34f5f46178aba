package main

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/paritysync/paritysync/activities/store"
	"github.com/paritysync/paritysync/config"
	"github.com/paritysync/paritysync/ops"
)

// Completion callbacks. A batch posted with callback_url=<URL> receives one signed
// POST when it ends: BatchSync's FinishBatch puts the event in PostgreSQL's outbox
// with the batch's end, and intake's delivery loop sends it, at least once, retried
// with backoff, the same event id and body on every attempt. A webhook post
// (POST /v1/changes?callback_url=<URL>) receives one when every change it had
// accepted has its outcome: the delivery loop finds such posts at each poll and
// queues their event in the same outbox (store.QueuePostCallbacks).
//
// PARITYSYNC_CALLBACKS_FILE (YAML) lists, per tenant, the secret that signs its
// callbacks and the URLs they may go to:
//
//	tenants:
//	  acme:
//	    secret_file: /run/secrets/acme-callbacks   # at least 16 bytes
//	    allow:
//	      - https://pms.acme.example/paritysync/    # a prefix ending in /, or a whole URL
//
// An allow entry is an https URL. An http entry is refused unless its host is the
// loopback address 127.0.0.1 or [::1] — a test-only receiver on the same machine,
// which must be listed explicitly like any other. A callback_url must start with
// one of its tenant's entries (a prefix ends at a /), carry no user or password and
// no fragment; a tenant without an entry names no callback_url.
//
// Each attempt carries Paritysync-Event-Id, Paritysync-Timestamp (Unix seconds)
// and Paritysync-Signature: v1=<hex HMAC-SHA256 over "<timestamp>.<body>", keyed
// with the tenant's secret>. The secret is read once at start and never logged.

// callbackTenant is one tenant's entry of the callbacks file.
type callbackTenant struct {
	secret []byte
	allow  []string
}

// callbackConfig is the parsed callbacks file.
type callbackConfig struct {
	tenants map[string]callbackTenant
}

// Rules of callback_url, as a 400 names them.
const (
	ruleCallbackAllowed = "must start with one of the tenant's allowed callback URLs (PARITYSYNC_CALLBACKS_FILE)"
	ruleCallbackURL     = "must be an absolute https URL without user, password, fragment or a query parameter named like a secret (token, secret, pass…), at most 2048 characters"
	minCallbackSecret   = 16
)

// loadCallbacks reads the callbacks file at path; "" configures no callbacks.
func loadCallbacks(path string) (*callbackConfig, error) {
	cfg := &callbackConfig{tenants: map[string]callbackTenant{}}
	if path == "" {
		return cfg, nil
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("PARITYSYNC_CALLBACKS_FILE: %w", err)
	}
	var file struct {
		Tenants map[string]struct {
			SecretFile string   `yaml:"secret_file"`
			Allow      []string `yaml:"allow"`
		} `yaml:"tenants"`
	}
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	dec.KnownFields(true)
	if err := dec.Decode(&file); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("PARITYSYNC_CALLBACKS_FILE %s: %w", path, err)
	}
	for name, t := range file.Tenants {
		where := fmt.Sprintf("PARITYSYNC_CALLBACKS_FILE %s: tenant %s", path, name)
		if !ops.TenantPattern.MatchString(name) {
			return nil, fmt.Errorf("%s: a tenant name must match %s", where, ops.TenantPattern)
		}
		secret, err := os.ReadFile(t.SecretFile)
		if err != nil {
			return nil, fmt.Errorf("%s: secret_file: %w", where, err)
		}
		secret = bytes.TrimSpace(secret)
		if len(secret) < minCallbackSecret {
			return nil, fmt.Errorf("%s: secret_file: the secret must be at least %d bytes", where, minCallbackSecret)
		}
		for _, a := range t.Allow {
			if err := checkAllowEntry(a); err != nil {
				return nil, fmt.Errorf("%s: allow %q: %w", where, a, err)
			}
		}
		cfg.tenants[name] = callbackTenant{secret: secret, allow: t.Allow}
	}
	return cfg, nil
}

// checkAllowEntry holds an allow entry to its rule: https, or http on a loopback
// address (tests only).
func checkAllowEntry(a string) error {
	u, err := url.Parse(a)
	if err != nil || u.Host == "" || u.User != nil || u.Fragment != "" {
		return errors.New("want an absolute URL without user, password or fragment")
	}
	switch u.Scheme {
	case "https":
		return nil
	case "http":
		if ip := net.ParseIP(u.Hostname()); ip != nil && ip.IsLoopback() {
			return nil
		}
		return errors.New("http is allowed only for a loopback address (127.0.0.1, [::1]): a test receiver; use https")
	}
	return errors.New("want https")
}

// checkCallback holds a callback_url to tenant's allow-list; it returns the rule
// broken, or "".
func (c *callbackConfig) checkCallback(tenant, raw string) string {
	u, err := url.Parse(raw)
	if len(raw) > 2048 || err != nil || u.Host == "" || u.User != nil || u.Fragment != "" ||
		(u.Scheme != "https" && u.Scheme != "http") || config.MaskURL(raw) != raw {
		// The URL travels in the workflow's input: nothing in it may be a secret
		// (a password, or a query parameter named like one).
		return ruleCallbackURL
	}
	t, ok := c.tenants[tenant]
	if !ok {
		return ruleCallbackAllowed
	}
	for _, a := range t.allow {
		if raw == a || strings.HasSuffix(a, "/") && strings.HasPrefix(raw, a) {
			return ""
		}
	}
	return ruleCallbackAllowed
}

// Signature headers of a callback.
const (
	headerEventID   = "Paritysync-Event-Id"
	headerTimestamp = "Paritysync-Timestamp"
	headerSignature = "Paritysync-Signature"
)

// signCallback is the signature header's value for body sent at timestamp.
func signCallback(secret []byte, timestamp string, body []byte) string {
	mac := hmac.New(sha256.New, secret)
	mac.Write([]byte(timestamp))
	mac.Write([]byte("."))
	mac.Write(body)
	return "v1=" + hex.EncodeToString(mac.Sum(nil))
}

// Delivery of callbacks: the loop claims up to callbackClaim due events every
// poll, holding each for callbackLease; a failed attempt comes due again after a
// full-jitter backoff from the base, doubling, capped at callbackMaxBackoff, and
// the event is given up after callbackMaxAttempts (about a day at the defaults).
const (
	DefaultCallbackPoll    = time.Second
	DefaultCallbackBackoff = 5 * time.Second
	callbackMaxBackoff     = 2 * time.Hour
	callbackMaxAttempts    = 20
	callbackClaim          = 20
	callbackLease          = time.Minute
	callbackTimeout        = 10 * time.Second
)

// callbackDeliverer sends the outbox's events.
type callbackDeliverer struct {
	cfg     *callbackConfig
	st      *store.Store
	client  *http.Client
	poll    time.Duration
	backoff time.Duration
	log     *slog.Logger
	now     func() time.Time
}

func newCallbackDeliverer(cfg *callbackConfig, st *store.Store, poll, backoff time.Duration, log *slog.Logger) *callbackDeliverer {
	if poll <= 0 {
		poll = DefaultCallbackPoll
	}
	if backoff <= 0 {
		backoff = DefaultCallbackBackoff
	}
	return &callbackDeliverer{cfg: cfg, st: st, poll: poll, backoff: backoff, log: log, now: time.Now,
		client: &http.Client{Timeout: callbackTimeout,
			// A redirect is a failed attempt: the allow-list names where events go.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

// run delivers due events until ctx ends.
func (d *callbackDeliverer) run(ctx context.Context) {
	onTicks(ctx, d.poll, func() {
		// Webhook posts whose every change has its outcome now: their events join
		// the outbox (once), delivered below like a batch's.
		if _, err := d.st.QueuePostCallbacks(ctx, changeBatchPrefix, callbackClaim); err != nil && ctx.Err() == nil {
			d.log.Warn("queue post callbacks", "error", err)
		}
		due, err := d.st.ClaimCallbacks(ctx, callbackClaim, callbackLease)
		if err != nil {
			if ctx.Err() == nil {
				d.log.Warn("claim callbacks", "error", err)
			}
			return
		}
		for _, c := range due {
			d.deliver(ctx, c)
		}
	})
}

// deliver makes one attempt at c and records it.
func (d *callbackDeliverer) deliver(ctx context.Context, c store.Callback) {
	why := d.attempt(ctx, c)
	attempts := c.Attempts + 1
	var retryAt time.Time
	if why != "" && attempts < callbackMaxAttempts {
		retryAt = d.now().Add(d.wait(attempts))
	}
	if err := d.st.CallbackAttempted(ctx, c.EventID, why == "", why, retryAt); err != nil {
		d.log.Warn("record callback attempt", "event", c.EventID, "error", err)
		return
	}
	switch {
	case why == "":
		d.log.Info("callback delivered", "event", c.EventID, "tenant", c.Tenant, "attempts", attempts)
	case retryAt.IsZero():
		d.log.Error("callback given up", "event", c.EventID, "tenant", c.Tenant, "attempts", attempts, "last", why)
	default:
		d.log.Warn("callback failed; retrying", "event", c.EventID, "tenant", c.Tenant, "attempts", attempts,
			"retry_at", retryAt.UTC().Format(time.RFC3339), "why", why)
	}
}

// wait is the full-jitter backoff after the given number of attempts, at least a
// tenth of the base.
func (d *callbackDeliverer) wait(attempts int) time.Duration {
	ceiling := d.backoff << min(attempts-1, 20)
	if ceiling <= 0 || ceiling > callbackMaxBackoff {
		ceiling = callbackMaxBackoff
	}
	return d.backoff/10 + rand.N(ceiling)
}

// attempt POSTs c once; it returns "" when the receiver answered 2xx, else why not.
func (d *callbackDeliverer) attempt(ctx context.Context, c store.Callback) string {
	t, ok := d.cfg.tenants[c.Tenant]
	if !ok {
		return "tenant " + c.Tenant + " has no entry in PARITYSYNC_CALLBACKS_FILE"
	}
	ts := strconv.FormatInt(d.now().Unix(), 10)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.URL, bytes.NewReader(c.Body))
	if err != nil {
		return "callback URL: " + err.Error()
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "paritysync-intake")
	req.Header.Set(headerEventID, c.EventID)
	req.Header.Set(headerTimestamp, ts)
	req.Header.Set(headerSignature, signCallback(t.secret, ts, c.Body))
	resp, err := d.client.Do(req)
	if err != nil {
		return "post: " + err.Error()
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	_ = resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return "receiver answered " + resp.Status
	}
	return ""
}
