// Command otasim serves the OTA channel simulator: a strict channel to demo and test
// paritysync against.
//
//	go run ./otasim -addr :8090 -config otasim.yaml -limit expedia=30 -faults '{"error_ratio":0.05}'
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/paritysync/paritysync/models"
	"github.com/paritysync/paritysync/otasim/sim"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		slog.Error("otasim", "error", err)
		os.Exit(1)
	}
}

// fileConfig is the YAML file: the simulator's config plus where to listen.
type fileConfig struct {
	Addr       string `yaml:"addr"`
	sim.Config `yaml:",inline"`
}

func run(args []string) error {
	fc, err := loadConfig(args)
	if err != nil {
		return err
	}
	s := sim.New(fc.Config)
	logEffective(fc)

	srv := &http.Server{Addr: fc.Addr, Handler: s, ReadHeaderTimeout: 10 * time.Second}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	errc := make(chan error, 1)
	go func() { errc <- srv.ListenAndServe() }()
	select {
	case err := <-errc:
		return fmt.Errorf("serve %s: %w", fc.Addr, err)
	case <-ctx.Done():
	}
	slog.Info("otasim stopping")
	s.Close() // release hanging requests so Shutdown can finish
	shutCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutCtx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	return nil
}

// loadConfig builds the configuration from flags, the environment and the optional
// YAML file; a flag that is given wins over the file.
func loadConfig(args []string) (fileConfig, error) {
	fs := flag.NewFlagSet("otasim", flag.ContinueOnError)
	var (
		addr       = fs.String("addr", envOr("OTASIM_ADDR", ":8090"), "listen address")
		configPath = fs.String("config", os.Getenv("OTASIM_CONFIG"), "optional YAML file (channels, tokens, faults)")
		tokens     = fs.String("static-tokens", os.Getenv("OTASIM_STATIC_TOKENS"), "comma-separated bearer tokens that never expire")
		maxAge     = fs.Duration("token-max-age", 0, "age after which a simtoken-<unix> token gets 401 (default 1h)")
		seed       = fs.Uint64("seed", 1, "seed of fault injection")
		limits     = fs.String("limit", "", "per-channel requests per 60 s, e.g. booking_com=90,expedia=60")
		quotas     = fs.String("quota", "", "per-channel daily quota, e.g. expedia=5000")
		scopes     = fs.String("scope", "", "per-channel limit scope (channel|property), e.g. agoda=property")
		faults     = fs.String("faults", "", `faults as JSON, e.g. {"error_ratio":0.1,"storm_seconds":30}`)
		offset     = fs.Duration("clock-offset", 0, "shift of the channel's clock from the host's, e.g. -5s (Date headers, Retry-After dates)")
		retryAfter = fs.String("retry-after", "", "form of Retry-After: alternate (default), seconds or date")
	)
	if err := fs.Parse(args); err != nil {
		return fileConfig{}, err
	}

	fc := fileConfig{Addr: *addr}
	if *configPath != "" {
		b, err := os.ReadFile(*configPath)
		if err != nil {
			return fc, fmt.Errorf("read config: %w", err)
		}
		// Unknown keys are errors: a misspelt limit must not silently fall back.
		dec := yaml.NewDecoder(bytes.NewReader(b))
		dec.KnownFields(true)
		if err := dec.Decode(&fc); err != nil && !errors.Is(err, io.EOF) {
			return fc, fmt.Errorf("parse %s: %w", *configPath, err)
		}
	}
	// Flags win over the file, but only when given.
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if set["addr"] || fc.Addr == "" {
		fc.Addr = *addr
	}
	if *tokens != "" {
		fc.StaticTokens = append(fc.StaticTokens, strings.Split(*tokens, ",")...)
	}
	if set["token-max-age"] {
		fc.TokenMaxAge = *maxAge
	}
	if set["seed"] || fc.Seed == 0 {
		fc.Seed = *seed
	}
	if len(fc.Channels) == 0 {
		fc.Channels = models.DefaultChannels()
	}
	if err := overrideChannels(fc.Channels, *limits, atLeast(1, "want a positive integer",
		func(c *models.ChannelConfig, n int) { c.RatePerMinute = n })); err != nil {
		return fc, fmt.Errorf("-limit: %w", err)
	}
	if err := overrideChannels(fc.Channels, *quotas, atLeast(0, "want a non-negative integer",
		func(c *models.ChannelConfig, n int) { c.DailyQuota = n })); err != nil {
		return fc, fmt.Errorf("-quota: %w", err)
	}
	if err := overrideChannels(fc.Channels, *scopes, func(c *models.ChannelConfig, v string) error {
		if s := models.LimitScope(v); s != models.ScopeChannel && s != models.ScopeProperty {
			return fmt.Errorf("want channel or property")
		}
		c.Scope = models.LimitScope(v)
		return nil
	}); err != nil {
		return fc, fmt.Errorf("-scope: %w", err)
	}
	if *faults != "" {
		var f sim.Faults
		if err := json.Unmarshal([]byte(*faults), &f); err != nil {
			return fc, fmt.Errorf("-faults: %w", err)
		}
		fc.Faults = f
	}
	if set["clock-offset"] {
		fc.ClockOffset = *offset
	}
	if set["retry-after"] {
		fc.RetryAfter = *retryAfter
	}
	if err := fc.Config.Validate(); err != nil {
		return fc, err
	}
	for _, c := range fc.Channels {
		if c.Slug == "" {
			return fc, errors.New("channels: every channel needs a slug")
		}
		if c.Protocol != "" && !slices.Contains(models.Protocols, c.Protocol) {
			return fc, fmt.Errorf("channel %s: protocol: must be paritysync, channex or opentravel, got %q", c.Slug, c.Protocol)
		}
	}
	return fc, nil
}

// atLeast is an override that sets an integer no smaller than least; rule is the answer
// to anything else.
func atLeast(least int, rule string, set func(*models.ChannelConfig, int)) func(*models.ChannelConfig, string) error {
	return func(c *models.ChannelConfig, v string) error {
		n, err := strconv.Atoi(v)
		if err != nil || n < least {
			return errors.New(rule)
		}
		set(c, n)
		return nil
	}
}

// overrideChannels applies a "slug=value,slug=value" flag to the named channels.
func overrideChannels(chs []models.ChannelConfig, spec string, apply func(*models.ChannelConfig, string) error) error {
	if spec == "" {
		return nil
	}
	for _, part := range strings.Split(spec, ",") {
		slug, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			return fmt.Errorf("%q: want slug=value", part)
		}
		found := false
		for i := range chs {
			if chs[i].Slug == slug {
				if err := apply(&chs[i], v); err != nil {
					return fmt.Errorf("%s: %w", slug, err)
				}
				found = true
			}
		}
		if !found {
			return fmt.Errorf("%s: no such channel", slug)
		}
	}
	return nil
}

// logEffective prints the configuration in force, tokens masked.
func logEffective(fc fileConfig) {
	masked := make([]string, len(fc.StaticTokens))
	for i, t := range fc.StaticTokens {
		masked[i] = mask(t)
	}
	slog.Info("otasim config", "addr", fc.Addr, "token_max_age", durOr(fc.TokenMaxAge, sim.DefaultTokenMaxAge),
		"static_tokens", strings.Join(masked, ","), "seed", fc.Seed)
	for _, c := range fc.Channels {
		slog.Info("otasim channel", "slug", c.Slug, "protocol", c.Protocol, "base_path", c.BasePath, "rate_per_minute", c.RatePerMinute,
			"scope", c.Scope, "daily_quota", c.DailyQuota, "quota_unit", c.QuotaUnit,
			"max_lines_per_request", c.MaxLinesPerRequest)
	}
	f, _ := json.Marshal(fc.Faults)
	slog.Info("otasim faults", "faults", string(f))
}

func mask(s string) string {
	if len(s) <= 4 {
		return "****"
	}
	return s[:2] + "****" + s[len(s)-2:]
}

func durOr(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}
