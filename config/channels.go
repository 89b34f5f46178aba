package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/paritysync/paritysync/models"
)

// EnvChannelPrefix starts every per-channel environment override:
// PARITYSYNC_CHANNEL_<SLUG>_<FIELD>, SLUG upper-cased.
const EnvChannelPrefix = "PARITYSYNC_CHANNEL_"

// channelsFile is the YAML channel file. Every field of an entry is a pointer so an
// entry overrides exactly the fields it sets and nothing else.
type channelsFile struct {
	Channels []channelEntry `yaml:"channels"`
}

type channelEntry struct {
	Slug               string                    `yaml:"slug"`
	Protocol           *models.Protocol          `yaml:"protocol"`
	BaseURL            *string                   `yaml:"base_url"`
	CredentialsFile    *string                   `yaml:"credentials_file"`
	ReadBack           *bool                     `yaml:"read_back"`
	Channex            *models.ChannexMapping    `yaml:"channex"`
	OpenTravel         *models.OpenTravelMapping `yaml:"opentravel"`
	BasePath           *string                   `yaml:"base_path"`
	RatePerMinute      *int                      `yaml:"rate_per_minute"`
	Window             *string                   `yaml:"window"`
	Burst              *int                      `yaml:"burst"`
	Shares             *shareEntry               `yaml:"shares"`
	Scope              *models.LimitScope        `yaml:"scope"`
	DailyQuota         *int                      `yaml:"daily_quota"`
	QuotaUnit          *models.QuotaUnit         `yaml:"quota_unit"`
	HorizonDays        *int                      `yaml:"horizon_days"`
	MaxLinesPerRequest *int                      `yaml:"max_lines_per_request"`
	MaxRetryAfter      *string                   `yaml:"max_retry_after"`
	// PriorityReserve is no longer supported: it is read only to refuse it by name.
	PriorityReserve *int    `yaml:"priority_reserve"`
	BreakerFailures *int    `yaml:"breaker_failures"`
	BreakerCooldown *string `yaml:"breaker_cooldown"`
	MaxApplyDelay   *string `yaml:"max_apply_delay"`
}

type shareEntry struct {
	Rates        *int `yaml:"rates"`
	Availability *int `yaml:"availability"`
	Restrictions *int `yaml:"restrictions"`
}

// LoadChannels is the effective channel configuration: DefaultChannels, then the
// YAML file at path (optional: "" skips it), then PARITYSYNC_CHANNEL_<SLUG>_*
// environment overrides read through getenv (nil skips them; tests pass a map's
// lookup instead of os.Getenv). Every problem is reported, each naming
// the file or variable it came from, so an operator fixes them in one pass.
func LoadChannels(path string, getenv func(string) string) ([]models.ChannelConfig, error) {
	channels := models.DefaultChannels()
	// sources records, per channel, where its non-default values came from, so a
	// validation error can name them.
	sources := make([][]string, len(channels))
	index := make(map[string]int, len(channels))
	for i, c := range channels {
		index[c.Slug] = i
	}
	var errs []error

	if path != "" {
		entries, err := readChannelsFile(path)
		if err != nil {
			return nil, err
		}
		seen := make(map[string]bool, len(entries))
		for n, e := range entries {
			where := fmt.Sprintf("channels file %s: channel %d", path, n+1)
			switch {
			case e.Slug == "":
				errs = append(errs, fmt.Errorf("%s: slug is required", where))
				continue
			case !slugPattern.MatchString(e.Slug):
				errs = append(errs, fmt.Errorf("%s: slug %q: want lower-case letters, digits and _", where, e.Slug))
				continue
			case seen[e.Slug]:
				errs = append(errs, fmt.Errorf("%s: slug %s listed twice", where, e.Slug))
				continue
			}
			seen[e.Slug] = true
			i, ok := index[e.Slug]
			if !ok {
				perMinute := models.DefaultRatePerMinute
				if e.RatePerMinute != nil {
					perMinute = *e.RatePerMinute
				}
				channels = append(channels, models.NewChannelConfig(e.Slug, perMinute))
				sources = append(sources, nil)
				i = len(channels) - 1
				index[e.Slug] = i
			}
			if err := e.applyTo(&channels[i]); err != nil {
				errs = append(errs, fmt.Errorf("channels file %s: channel %s: %w", path, e.Slug, err))
			}
			sources[i] = append(sources[i], "channels file "+path)
		}
	}

	if getenv != nil {
		for i := range channels {
			set, err := applyChannelEnv(&channels[i], getenv)
			errs = append(errs, err...)
			sources[i] = append(sources[i], set...)
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}

	for i, c := range channels {
		if err := c.Validate(); err != nil {
			from := "defaults"
			if len(sources[i]) > 0 {
				from = strings.Join(sources[i], ", ")
			}
			errs = append(errs, fmt.Errorf("%s: %w", from, err))
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return channels, nil
}

func readChannelsFile(path string) ([]channelEntry, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("channels file: %w", err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	// A misspelt key would otherwise be ignored silently and the default kept.
	dec.KnownFields(true)
	var f channelsFile
	if err := dec.Decode(&f); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("channels file %s: %w", path, err)
	}
	return f.Channels, nil
}

// errPriorityReserve refuses a channel file that still sets priority_reserve: the
// token buckets it reserved tokens of are gone, and the limiter serves urgent work
// first without it (it takes the earliest slot less urgent work holds).
var errPriorityReserve = errors.New("priority_reserve: no longer supported (the limiter has no token reserve: " +
	"urgent work takes the earliest slot held by less urgent work); remove it")

// applyTo copies the fields e sets onto c.
func (e channelEntry) applyTo(c *models.ChannelConfig) error {
	if e.PriorityReserve != nil {
		return errPriorityReserve
	}
	setInt := func(dst *int, src *int) {
		if src != nil {
			*dst = *src
		}
	}
	if e.Protocol != nil {
		c.Protocol = *e.Protocol
		// A protocol brings its own defaults; fields set below still win.
		c.ReadBack = c.Protocol.HasReadBack()
		if c.Protocol == models.ProtocolChannex {
			def := models.NewChannexChannel(c.Slug, models.ChannexMapping{})
			c.RatePerMinute, c.Burst, c.Shares, c.Scope = def.RatePerMinute, def.Burst, def.Shares, def.Scope
		}
	}
	if e.BaseURL != nil {
		c.BaseURL = *e.BaseURL
		// A channel at its own URL has its endpoints at the root, not under /{slug}.
		c.BasePath = ""
	}
	if e.CredentialsFile != nil {
		c.CredentialsFile = *e.CredentialsFile
	}
	if e.ReadBack != nil {
		c.ReadBack = *e.ReadBack
	}
	if e.Channex != nil {
		c.Channex = *e.Channex
	}
	if e.OpenTravel != nil {
		c.OpenTravel = *e.OpenTravel
	}
	if e.BasePath != nil {
		c.BasePath = *e.BasePath
	}
	setInt(&c.RatePerMinute, e.RatePerMinute)
	setInt(&c.Burst, e.Burst)
	if e.Shares != nil {
		setInt(&c.Shares.Rates, e.Shares.Rates)
		setInt(&c.Shares.Availability, e.Shares.Availability)
		setInt(&c.Shares.Restrictions, e.Shares.Restrictions)
	}
	if e.Scope != nil {
		c.Scope = *e.Scope
	}
	setInt(&c.DailyQuota, e.DailyQuota)
	if e.QuotaUnit != nil {
		c.QuotaUnit = *e.QuotaUnit
	}
	setInt(&c.HorizonDays, e.HorizonDays)
	setInt(&c.MaxLinesPerRequest, e.MaxLinesPerRequest)
	setInt(&c.BreakerFailures, e.BreakerFailures)
	// Only a channel's own entry sets its window: there is no environment
	// override, so production runs at 60 s unless a channel declares otherwise.
	for _, d := range []struct {
		field, example string
		from           *string
		to             *time.Duration
	}{
		{"breaker_cooldown", "30s", e.BreakerCooldown, &c.BreakerCooldown},
		{"window", "60s", e.Window, &c.Window},
		{"max_apply_delay", "15s", e.MaxApplyDelay, &c.MaxApplyDelay},
		{"max_retry_after", "5m", e.MaxRetryAfter, &c.MaxRetryAfter},
	} {
		if d.from == nil {
			continue
		}
		v, err := time.ParseDuration(*d.from)
		if err != nil {
			return fmt.Errorf("%s: want a duration like %q: %w", d.field, d.example, err)
		}
		*d.to = v
	}
	return nil
}

// applyChannelEnv applies the environment overrides of c and returns the names of
// the variables it used and the problems it found.
func applyChannelEnv(c *models.ChannelConfig, getenv func(string) string) (used []string, errs []error) {
	prefix := EnvChannelPrefix + strings.ToUpper(c.Slug) + "_"
	// read hands the variable prefix+name, when set, to parse; a value parse
	// refuses is a problem naming the variable.
	read := func(name string, parse func(val string) error) {
		name = prefix + name
		val := strings.TrimSpace(getenv(name))
		if val == "" {
			return
		}
		if err := parse(val); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
			return
		}
		used = append(used, name)
	}
	integer := func(dst *int) func(string) error {
		return func(val string) error {
			n, err := strconv.Atoi(val)
			if err != nil {
				return fmt.Errorf("want an integer, got %q", val)
			}
			*dst = n
			return nil
		}
	}
	duration := func(dst *time.Duration, example string) func(string) error {
		return func(val string) error {
			d, err := time.ParseDuration(val)
			if err != nil {
				return fmt.Errorf("want a duration like %q, got %q", example, val)
			}
			*dst = d
			return nil
		}
	}
	read("RATE_PER_MINUTE", integer(&c.RatePerMinute))
	read("BURST", integer(&c.Burst))
	read("DAILY_QUOTA", integer(&c.DailyQuota))
	read("MAX_LINES_PER_REQUEST", integer(&c.MaxLinesPerRequest))
	read("HORIZON_DAYS", integer(&c.HorizonDays))
	read("BREAKER_FAILURES", integer(&c.BreakerFailures))
	read("CREDENTIALS_FILE", func(val string) error { c.CredentialsFile = val; return nil })
	read("SCOPE", func(val string) error { c.Scope = models.LimitScope(val); return nil })
	read("BREAKER_COOLDOWN", duration(&c.BreakerCooldown, "30s"))
	read("MAX_RETRY_AFTER", duration(&c.MaxRetryAfter, "5m"))
	return used, errs
}

// slugPattern is a usable channel slug: it becomes a URL path segment, a Redis
// hash tag and an environment variable name, so only [a-z0-9_], starting with a
// letter.
var slugPattern = regexp.MustCompile(`^[a-z][a-z0-9_]*$`)
