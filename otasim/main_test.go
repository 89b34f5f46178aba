package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/paritysync/paritysync/models"
	"github.com/paritysync/paritysync/otasim/sim"
)

func TestLoadConfigFileThenFlags(t *testing.T) {
	path := filepath.Join(t.TempDir(), "otasim.yaml")
	yaml := `
addr: ":9000"
token_max_age: 10m
static_tokens: [from-file]
channels:
  - slug: booking_com
    rate_per_minute: 90
    scope: property
    daily_quota: 100
  - slug: expedia
    rate_per_minute: 60
    window: 6s
clock_offset: -5s
retry_after: date
faults:
  error_ratio: 0.1
  storm_seconds: 5
`
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	fc, err := loadConfig([]string{"-config", path, "-limit", "expedia=30", "-quota", "expedia=7",
		"-static-tokens", "a,b", "-faults", `{"partial_ratio":0.5}`})
	if err != nil {
		t.Fatal(err)
	}
	if fc.Addr != ":9000" || fc.TokenMaxAge != 10*time.Minute || len(fc.StaticTokens) != 3 {
		t.Errorf("config %+v", fc)
	}
	if c := fc.Channels[0]; c.Slug != "booking_com" || c.Scope != models.ScopeProperty || c.DailyQuota != 100 {
		t.Errorf("booking_com %+v", c)
	}
	if fc.ClockOffset != -5*time.Second || fc.RetryAfter != sim.RetryAfterDate {
		t.Errorf("clock_offset %s retry_after %q", fc.ClockOffset, fc.RetryAfter)
	}
	if c := fc.Channels[1]; c.RatePerMinute != 30 || c.DailyQuota != 7 || c.Window != 6*time.Second {
		t.Errorf("expedia %+v", c)
	}
	// -faults replaces the file's faults as a whole.
	if fc.Faults.PartialRatio != 0.5 || fc.Faults.ErrorRatio != 0 {
		t.Errorf("faults %+v", fc.Faults)
	}
}

func TestLoadConfigRejectsBadInput(t *testing.T) {
	for _, args := range [][]string{
		{"-limit", "nope=5"},
		{"-limit", "expedia=-1"},
		{"-scope", "agoda=global"},
		{"-faults", `{"error_ratio":3}`},
		{"-faults", `not json`},
		{"-config", "/does/not/exist.yaml"},
		{"-config", writeFile(t, "channels:\n  - slug: expedia\n    rate_per_minut: 5\n")},
	} {
		if _, err := loadConfig(args); err == nil {
			t.Errorf("%v: no error", args)
		}
	}
}

func TestLoadConfigDefaults(t *testing.T) {
	t.Setenv("OTASIM_ADDR", "")
	fc, err := loadConfig(nil)
	if err != nil {
		t.Fatal(err)
	}
	if fc.Addr != ":8090" || len(fc.Channels) != len(models.DefaultChannels()) || fc.Seed != 1 {
		t.Errorf("config %+v", fc)
	}
}

func writeFile(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestExampleConfigLoads(t *testing.T) {
	fc, err := loadConfig([]string{"-config", "otasim.example.yaml"})
	if err != nil {
		t.Fatal(err)
	}
	if len(fc.Channels) != 5 || fc.Channels[1].Scope != models.ScopeProperty || fc.Faults.StormStatus != 429 ||
		fc.Channels[3].Protocol != models.ProtocolChannex || fc.Channels[4].Protocol != models.ProtocolOpenTravel {
		t.Errorf("config %+v", fc)
	}
}

func TestConfigRefusesAnUnknownProtocol(t *testing.T) {
	path := writeFile(t, "channels:\n  - {slug: cx, protocol: chanex}\n")
	if _, err := loadConfig([]string{"-config", path}); err == nil || !strings.Contains(err.Error(), "protocol") {
		t.Errorf("misspelt protocol: %v, want an error naming protocol", err)
	}
}
