package config

import (
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/paritysync/paritysync/models"
)

// MaxHTTPTimeout is the longest PARITYSYNC_HTTP_TIMEOUT a push can fit in
// models.PushActivityTimeout.
const MaxHTTPTimeout = 20 * time.Second

// Settings is the process configuration of the worker and the starter: defaults,
// overridden by environment variables. Channel limits live in ChannelConfig.
type Settings struct {
	RedisURL          string // REDIS_URL
	DatabaseURL       string // PARITYSYNC_DATABASE_URL
	TemporalAddress   string // TEMPORAL_ADDRESS
	TemporalNamespace string // TEMPORAL_NAMESPACE
	TemporalUI        string // TEMPORAL_UI_URL
	// TemporalTLS and TemporalAPIKeyFile reach Temporal Cloud or a secured cluster.
	TemporalTLS        TemporalTLS   // TEMPORAL_TLS_CERT, _KEY, _CA, _SERVER_NAME
	TemporalAPIKeyFile string        // TEMPORAL_API_KEY_FILE
	TaskQueue          string        // PARITYSYNC_TASK_QUEUE
	ChannelURL         string        // PARITYSYNC_CHANNEL_URL
	ChannelsFile       string        // PARITYSYNC_CHANNELS_FILE
	Token              string        // PARITYSYNC_TOKEN
	TokenFile          string        // PARITYSYNC_TOKEN_FILE
	KeyPrefix          string        // PARITYSYNC_KEY_PREFIX
	HTTPTimeout        time.Duration // PARITYSYNC_HTTP_TIMEOUT
	MetricsAddr        string        // PARITYSYNC_METRICS_ADDR
	ChunkSize          int           // PARITYSYNC_CHUNK_SIZE
	MaxInFlight        int           // PARITYSYNC_MAX_INFLIGHT: pushes in flight per channel, at most
	PropertyPattern    string        // PARITYSYNC_PROPERTY_PATTERN
	MaxActivities      int           // PARITYSYNC_MAX_ACTIVITIES
	ShutdownTimeout    time.Duration // PARITYSYNC_SHUTDOWN_TIMEOUT
	// Zones decides each property's "today" for stay-date validation.
	Zones models.PropertyZones // PARITYSYNC_TIME_ZONE, PARITYSYNC_PROPERTY_ZONES
	// PausePoll is how often work held by an operator pause that no resume signal
	// ended asks the limiter again (PARITYSYNC_PAUSE_POLL).
	PausePoll time.Duration
}

// TemporalTLS names the files of a TLS connection to Temporal: a client certificate
// and key for mutual TLS and a CA bundle for a private CA; all empty means plain TCP
// (unless an API key turns TLS on).
type TemporalTLS struct {
	CertFile   string // TEMPORAL_TLS_CERT
	KeyFile    string // TEMPORAL_TLS_KEY
	CAFile     string // TEMPORAL_TLS_CA
	ServerName string // TEMPORAL_TLS_SERVER_NAME
}

// Enabled reports whether any TLS setting is made.
func (t TemporalTLS) Enabled() bool {
	return t.CertFile != "" || t.KeyFile != "" || t.CAFile != "" || t.ServerName != ""
}

// DefaultSettings is a local set-up: everything on 127.0.0.1.
func DefaultSettings() Settings {
	return Settings{
		RedisURL:          "redis://127.0.0.1:6379/0",
		DatabaseURL:       "postgres://postgres@127.0.0.1:5432/paritysync?sslmode=disable",
		TemporalAddress:   "127.0.0.1:7233",
		TemporalNamespace: "default",
		TemporalUI:        "http://127.0.0.1:8233",
		TaskQueue:         models.TaskQueue,
		ChannelURL:        "http://127.0.0.1:8090",
		KeyPrefix:         "paritysync:",
		HTTPTimeout:       10 * time.Second,
		MetricsAddr:       "127.0.0.1:9464",
		ChunkSize:         100,
		MaxInFlight:       models.DefaultMaxInFlight,
		PropertyPattern:   `^prop_[0-9a-f]{8}$`,
		MaxActivities:     32,
		ShutdownTimeout:   30 * time.Second,
		PausePoll:         30 * time.Minute,
	}
}

// LoadSettings is DefaultSettings overridden by the environment; a bad value is an
// error naming the variable and the rule.
func LoadSettings(getenv func(string) string) (Settings, error) {
	s := DefaultSettings()
	e := envReader{getenv: getenv}
	str, dur, num := e.str, e.dur, e.num
	str("REDIS_URL", &s.RedisURL)
	str("PARITYSYNC_DATABASE_URL", &s.DatabaseURL)
	str("TEMPORAL_ADDRESS", &s.TemporalAddress)
	str("TEMPORAL_NAMESPACE", &s.TemporalNamespace)
	str("TEMPORAL_UI_URL", &s.TemporalUI)
	str("PARITYSYNC_TASK_QUEUE", &s.TaskQueue)
	str("PARITYSYNC_CHANNEL_URL", &s.ChannelURL)
	str("PARITYSYNC_CHANNELS_FILE", &s.ChannelsFile)
	s.Token = getenv("PARITYSYNC_TOKEN")
	str("PARITYSYNC_TOKEN_FILE", &s.TokenFile)
	str("PARITYSYNC_KEY_PREFIX", &s.KeyPrefix)
	dur("PARITYSYNC_HTTP_TIMEOUT", &s.HTTPTimeout)
	str("PARITYSYNC_METRICS_ADDR", &s.MetricsAddr)
	num("PARITYSYNC_CHUNK_SIZE", &s.ChunkSize)
	num("PARITYSYNC_MAX_INFLIGHT", &s.MaxInFlight)
	str("PARITYSYNC_PROPERTY_PATTERN", &s.PropertyPattern)
	num("PARITYSYNC_MAX_ACTIVITIES", &s.MaxActivities)
	dur("PARITYSYNC_SHUTDOWN_TIMEOUT", &s.ShutdownTimeout)
	dur("PARITYSYNC_PAUSE_POLL", &s.PausePoll)
	str("TEMPORAL_TLS_CERT", &s.TemporalTLS.CertFile)
	str("TEMPORAL_TLS_KEY", &s.TemporalTLS.KeyFile)
	str("TEMPORAL_TLS_CA", &s.TemporalTLS.CAFile)
	str("TEMPORAL_TLS_SERVER_NAME", &s.TemporalTLS.ServerName)
	str("TEMPORAL_API_KEY_FILE", &s.TemporalAPIKeyFile)
	errs := e.errs
	if s.HTTPTimeout > MaxHTTPTimeout {
		errs = append(errs, fmt.Sprintf("PARITYSYNC_HTTP_TIMEOUT: must be at most %s (a push, its wait for a slot, the call and its records, must end within the %s its activity is given)",
			MaxHTTPTimeout, models.PushActivityTimeout))
	}
	if (s.TemporalTLS.CertFile == "") != (s.TemporalTLS.KeyFile == "") {
		errs = append(errs, "TEMPORAL_TLS_CERT and TEMPORAL_TLS_KEY: set both or neither")
	}
	zones, err := models.ParsePropertyZones(getenv("PARITYSYNC_TIME_ZONE"), getenv("PARITYSYNC_PROPERTY_ZONES"))
	if err != nil {
		errs = append(errs, err.Error())
	}
	s.Zones = zones
	if _, err := url.Parse(s.ChannelURL); err != nil || !strings.HasPrefix(s.ChannelURL, "http") {
		errs = append(errs, "PARITYSYNC_CHANNEL_URL: must be an http(s) URL")
	}
	if len(errs) > 0 {
		return s, fmt.Errorf("settings: %s", strings.Join(errs, "; "))
	}
	return s, nil
}

// String prints the effective settings with secrets masked, one key=value each.
func (s Settings) String() string {
	token := ""
	if s.Token != "" {
		token = "****"
	}
	return fmt.Sprintf("redis_url=%s database_url=%s temporal_address=%s namespace=%s task_queue=%s channel_url=%s "+
		"channels_file=%q token=%s token_file=%q key_prefix=%s http_timeout=%s metrics_addr=%s chunk_size=%d max_inflight=%d "+
		"max_activities=%d shutdown_timeout=%s temporal_tls_cert=%q temporal_tls_key=%q temporal_tls_ca=%q "+
		"temporal_api_key_file=%q time_zone=%s property_zones=%d",
		MaskURL(s.RedisURL), MaskURL(s.DatabaseURL), s.TemporalAddress, s.TemporalNamespace, s.TaskQueue, s.ChannelURL,
		s.ChannelsFile, token, s.TokenFile, s.KeyPrefix, s.HTTPTimeout, s.MetricsAddr, s.ChunkSize, s.MaxInFlight,
		s.MaxActivities, s.ShutdownTimeout, s.TemporalTLS.CertFile, s.TemporalTLS.KeyFile, s.TemporalTLS.CAFile,
		s.TemporalAPIKeyFile, s.Zones.Default(), s.Zones.Listed())
}

// masked stands in for a hidden secret, or for a whole connection string that
// cannot be read.
const masked = "xxxxx"

// MaskURL hides every secret of a connection string, in each form the Redis and
// PostgreSQL drivers take: the password of a URL's userinfo (redis://:pw@host,
// postgres://user:pw@host, an invalid % escape included, since the string is not
// decoded), a password-like query parameter (?password=, ?sslpassword=, …), and
// the password-like values of a key=value DSN (host=db password='a b'). A string
// that is none of these is masked whole. Every log line and error that prints a
// REDIS_URL or PARITYSYNC_DATABASE_URL goes through it (or through MaskError).
func MaskURL(raw string) string {
	s := strings.TrimSpace(raw)
	if s == "" {
		return ""
	}
	scheme, rest, isURL := strings.Cut(s, "://")
	switch {
	case !isURL && strings.Contains(s, "="):
		return secretKeyword.ReplaceAllString(s, "${1}"+masked)
	case !isURL || !urlScheme.MatchString(scheme):
		return masked
	}
	// The userinfo ends at the last '@': a password may hold '@', '/' or '?'
	// unescaped, and the drivers split there too. An '@' in the query only makes
	// this mask more than it must, never less.
	if at := strings.LastIndex(rest, "@"); at >= 0 {
		if user, _, hasPassword := strings.Cut(rest[:at], ":"); hasPassword {
			rest = user + ":" + masked + rest[at:]
		}
	}
	if path, query, ok := strings.Cut(rest, "?"); ok {
		params := strings.Split(query, "&")
		for i, p := range params {
			if k, _, ok := strings.Cut(p, "="); ok && secretName(k) {
				params[i] = k + "=" + masked
			}
		}
		rest = path + "?" + strings.Join(params, "&")
	}
	return scheme + "://" + rest
}

// MaskError is err with every secret of the connection string raw hidden from its
// message, for a driver's error that may quote the string it could not parse
// (url.Parse does). errors.Is and errors.As still see err.
func MaskError(err error, raw string) error {
	if err == nil {
		return nil
	}
	return &maskedError{err: err, raw: raw}
}

type maskedError struct {
	err error
	raw string
}

func (e *maskedError) Error() string {
	msg := e.err.Error()
	if strings.Contains(msg, e.raw) && strings.TrimSpace(e.raw) != "" {
		msg = strings.ReplaceAll(msg, e.raw, MaskURL(e.raw))
	}
	for _, secret := range secretsOf(e.raw) {
		msg = strings.ReplaceAll(msg, secret, masked)
	}
	// url.Parse quotes the bad escape itself, a piece of the password.
	return badEscape.ReplaceAllString(msg, `${1}"`+masked+`"`)
}

func (e *maskedError) Unwrap() error { return e.err }

// secretsOf lists the secrets MaskURL hides in raw, each as written and decoded,
// so a message quoting either form can be cleaned.
func secretsOf(raw string) []string {
	var out []string
	add := func(v string) {
		v = strings.Trim(v, "'")
		if v == "" || v == masked {
			return
		}
		out = append(out, v)
		if d, err := url.PathUnescape(v); err == nil && d != v {
			out = append(out, d)
		}
	}
	s := strings.TrimSpace(raw)
	scheme, rest, isURL := strings.Cut(s, "://")
	if !isURL || !urlScheme.MatchString(scheme) {
		for _, m := range secretKeyword.FindAllStringSubmatch(s, -1) {
			add(m[2])
		}
		return out
	}
	if at := strings.LastIndex(rest, "@"); at >= 0 {
		if _, pw, ok := strings.Cut(rest[:at], ":"); ok {
			add(pw)
		}
	}
	if _, query, ok := strings.Cut(rest, "?"); ok {
		for _, p := range strings.Split(query, "&") {
			if k, v, ok := strings.Cut(p, "="); ok && secretName(k) {
				add(v)
			}
		}
	}
	return out
}

// badEscape is url.Parse's report of an invalid % escape and the piece it quotes.
var badEscape = regexp.MustCompile(`(invalid URL escape )"[^"]*"`)

// urlScheme is what a URL scheme may be (RFC 3986).
var urlScheme = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]*$`)

// secretKeyword is a password-like key of a key=value DSN and its value, quoted
// (an unterminated quote runs to the end) or up to the next white space.
var secretKeyword = regexp.MustCompile(`(?i)((?:^|\s)[a-z_]*(?:pass|secret|token)[a-z_]*\s*=\s*)('(?:[^'\\]|\\.)*'?|\S*)`)

// secretName reports whether a query parameter's name says it holds a secret.
func secretName(k string) bool {
	if d, err := url.QueryUnescape(k); err == nil {
		k = d
	}
	k = strings.ToLower(k)
	return strings.Contains(k, "pass") || strings.Contains(k, "secret") || strings.Contains(k, "token")
}

// envReader reads environment variables into settings: a variable unset or blank
// keeps the default, a bad value adds a problem naming the variable and the rule.
type envReader struct {
	getenv func(string) string
	errs   []string
}

func (e *envReader) str(name string, dst *string) {
	if v := strings.TrimSpace(e.getenv(name)); v != "" {
		*dst = v
	}
}

func (e *envReader) dur(name string, dst *time.Duration) {
	readPositive(e, name, dst, time.ParseDuration, "a positive duration like 10s")
}

func (e *envReader) num(name string, dst *int) {
	readPositive(e, name, dst, strconv.Atoi, "a positive integer")
}

// readPositive reads name with parse into dst; a value that does not parse or is
// not above zero is a problem saying it must be what.
func readPositive[T int | time.Duration](e *envReader, name string, dst *T, parse func(string) (T, error), what string) {
	if v := strings.TrimSpace(e.getenv(name)); v != "" {
		n, err := parse(v)
		if err != nil || n <= 0 {
			e.errs = append(e.errs, name+": must be "+what)
			return
		}
		*dst = n
	}
}

// IntakeSettings is what the intake HTTP API reads besides Settings.
type IntakeSettings struct {
	Addr        string // PARITYSYNC_INTAKE_ADDR
	APIKeysFile string // PARITYSYNC_API_KEYS_FILE (required)
	// SmootherMaxPending is the admission limit of the channel smoothers intake
	// starts (PARITYSYNC_SMOOTHER_MAX_PENDING).
	SmootherMaxPending int
	// SubmitLinger is how long intake's per-channel submitter, idle, waits for more
	// posts before it sends one update to the smoother (PARITYSYNC_SUBMIT_LINGER,
	// a Go duration, at most 1s; default 0: posts that arrive while an update is
	// in flight go together in the next one anyway).
	SubmitLinger time.Duration
	// MaxConns and MaxConnsPerIP bound intake's open connections, in all and from
	// one client address (PARITYSYNC_MAX_CONNS, PARITYSYNC_MAX_CONNS_PER_IP); 0
	// takes intake's defaults.
	MaxConns, MaxConnsPerIP int
}

// DefaultIntakeAddr is where intake listens without PARITYSYNC_INTAKE_ADDR.
const DefaultIntakeAddr = "127.0.0.1:8080"

// LoadIntakeSettings reads intake's own variables; a bad or missing value is an
// error naming the variable and the rule.
func LoadIntakeSettings(getenv func(string) string) (IntakeSettings, error) {
	s := IntakeSettings{Addr: DefaultIntakeAddr, SmootherMaxPending: models.DefaultMaxPending}
	e := envReader{getenv: getenv}
	e.str("PARITYSYNC_INTAKE_ADDR", &s.Addr)
	s.APIKeysFile = strings.TrimSpace(getenv("PARITYSYNC_API_KEYS_FILE"))
	if s.APIKeysFile == "" {
		return s, fmt.Errorf("PARITYSYNC_API_KEYS_FILE: required (one tenant:<sha256 hex of the key>[:admin] per line)")
	}
	e.num("PARITYSYNC_SMOOTHER_MAX_PENDING", &s.SmootherMaxPending)
	e.num("PARITYSYNC_MAX_CONNS", &s.MaxConns)
	e.num("PARITYSYNC_MAX_CONNS_PER_IP", &s.MaxConnsPerIP)
	if len(e.errs) > 0 {
		return s, errors.New(e.errs[0])
	}
	if v := strings.TrimSpace(getenv("PARITYSYNC_SUBMIT_LINGER")); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 || d > time.Second {
			return s, fmt.Errorf("PARITYSYNC_SUBMIT_LINGER: must be a duration from 0 to 1s (e.g. 5ms)")
		}
		s.SubmitLinger = d
	}
	return s, nil
}
