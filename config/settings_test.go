package config

import (
	"errors"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/paritysync/paritysync/models"
)

func TestLoadSettingsRefusesAnHTTPTimeoutAPushCannotFit(t *testing.T) {
	env := map[string]string{}
	getenv := func(k string) string { return env[k] }

	s, err := LoadSettings(getenv)
	if err != nil {
		t.Fatalf("defaults: %v", err)
	}
	if s.HTTPTimeout+5*time.Second > models.PushActivityTimeout {
		t.Fatalf("the default HTTP timeout %s leaves no room in the push activity's %s", s.HTTPTimeout, models.PushActivityTimeout)
	}
	env["PARITYSYNC_HTTP_TIMEOUT"] = MaxHTTPTimeout.String()
	if _, err := LoadSettings(getenv); err != nil {
		t.Fatalf("PARITYSYNC_HTTP_TIMEOUT=%s: %v", MaxHTTPTimeout, err)
	}
	for _, bad := range []string{"25s", "1m"} {
		env["PARITYSYNC_HTTP_TIMEOUT"] = bad
		_, err := LoadSettings(getenv)
		if err == nil || !strings.Contains(err.Error(), "PARITYSYNC_HTTP_TIMEOUT: must be at most 20s") {
			t.Errorf("PARITYSYNC_HTTP_TIMEOUT=%s: want the rule named, got %v", bad, err)
		}
	}
}

// TestMaskURLHidesThePasswordInEveryForm masks each form of connection string the
// Redis and PostgreSQL drivers take: the password never survives, and what is not
// a secret (scheme, user, host, database, other options) stays readable.
func TestMaskURLHidesThePasswordInEveryForm(t *testing.T) {
	for _, tc := range []struct {
		name, raw, want string
	}{
		{"redis password in the userinfo", "redis://:s3cret@redis:6379/0", "redis://:xxxxx@redis:6379/0"},
		{"redis user and password", "rediss://app:s3cret@redis:6380/1", "rediss://app:xxxxx@redis:6380/1"},
		{"redis password with an invalid escape", "redis://:pa%zz@redis:6379", "redis://:xxxxx@redis:6379"},
		{"redis cluster", "redis://:s3cret@h1:7000,h2:7001", "redis://:xxxxx@h1:7000,h2:7001"},
		{"postgres user and password", "postgres://app:s3cret@db:5432/ps?sslmode=disable", "postgres://app:xxxxx@db:5432/ps?sslmode=disable"},
		{"postgres password with an invalid escape", "postgres://app:pa%zzword@db/ps", "postgres://app:xxxxx@db/ps"},
		{"password holding @ and /", "postgres://app:p@ss/w?rd@db/ps", "postgres://app:xxxxx@db/ps"},
		{"password query parameter", "postgres://app@db/ps?sslmode=disable&password=s3cret", "postgres://app@db/ps?sslmode=disable&password=xxxxx"},
		{"sslpassword query parameter", "postgres://db/ps?sslpassword=s3cret", "postgres://db/ps?sslpassword=xxxxx"},
		{"redis password query parameter", "redis://redis:6379/0?password=s3cret", "redis://redis:6379/0?password=xxxxx"},
		{"key=value DSN", "host=db user=app password=s3cret dbname=ps", "host=db user=app password=xxxxx dbname=ps"},
		{"key=value DSN, spaces around =", "host=db password = s3cret dbname=ps", "host=db password = xxxxx dbname=ps"},
		{"key=value DSN, quoted password", "host=db password='s3 cr\\'et' dbname=ps", "host=db password=xxxxx dbname=ps"},
		{"key=value DSN, unterminated quote", "host=db password='s3cret", "host=db password=xxxxx"},
		{"key=value DSN, upper case key", "host=db PASSWORD=s3cret", "host=db PASSWORD=xxxxx"},
		{"no password", "postgres://postgres@127.0.0.1:5432/paritysync?sslmode=disable", "postgres://postgres@127.0.0.1:5432/paritysync?sslmode=disable"},
		{"unparsable", "s3cret", "xxxxx"},
		{"bad scheme", "::s3cret@host", "xxxxx"},
		{"empty", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := MaskURL(tc.raw)
			if got != tc.want {
				t.Errorf("MaskURL(%q) = %q, want %q", tc.raw, got, tc.want)
			}
			for _, secret := range []string{"s3cret", "pa%zz", "s3 cr", "p@ss"} {
				if strings.Contains(got, secret) {
					t.Errorf("MaskURL(%q) = %q keeps %q", tc.raw, got, secret)
				}
			}
		})
	}
}

// TestSettingsStringAndMaskErrorNeverPrintThePassword puts a password in every
// form into REDIS_URL and PARITYSYNC_DATABASE_URL: the effective-config line, and
// an error quoting the string (as url.Parse's does), hold none of it.
func TestSettingsStringAndMaskErrorNeverPrintThePassword(t *testing.T) {
	for _, raw := range []string{
		"redis://:pa%zz@redis:6379", "postgres://u:pa%zzword@db/ps", "postgres://db/ps?password=pa%zzword",
		"host=db password=pa%zzword", "redis://:pa%25zz@redis:6379",
	} {
		s, err := LoadSettings(func(k string) string {
			return map[string]string{"REDIS_URL": raw, "PARITYSYNC_DATABASE_URL": raw}[k]
		})
		if err != nil {
			t.Fatal(err)
		}
		_, perr := url.Parse(raw)
		if perr == nil {
			perr = errors.New("parse " + strconv.Quote(raw) + ": refused")
		}
		for _, line := range []string{s.String(), MaskError(perr, raw).Error()} {
			if strings.Contains(line, "pa%zz") || strings.Contains(line, "pa%25zz") || strings.Contains(line, "%zz") {
				t.Errorf("%q: printed as %s", raw, line)
			}
		}
		if !errors.Is(MaskError(perr, raw), perr) {
			t.Error("MaskError keeps the error for errors.Is")
		}
	}
}

func TestLoadSettingsReadsMaxInFlight(t *testing.T) {
	env := map[string]string{}
	getenv := func(k string) string { return env[k] }
	if s, err := LoadSettings(getenv); err != nil || s.MaxInFlight != models.DefaultMaxInFlight {
		t.Fatalf("default: %d, %v", s.MaxInFlight, err)
	}
	env["PARITYSYNC_MAX_INFLIGHT"] = "64"
	if s, err := LoadSettings(getenv); err != nil || s.MaxInFlight != 64 {
		t.Fatalf("PARITYSYNC_MAX_INFLIGHT=64: %d, %v", s.MaxInFlight, err)
	}
	env["PARITYSYNC_MAX_INFLIGHT"] = "0"
	if _, err := LoadSettings(getenv); err == nil || !strings.Contains(err.Error(), "PARITYSYNC_MAX_INFLIGHT: must be a positive integer") {
		t.Fatalf("PARITYSYNC_MAX_INFLIGHT=0: want the rule named, got %v", err)
	}
}
