package models

import (
	"strings"
	"testing"
	"time"
)

func TestLoadSettingsRefusesAnHTTPTimeoutAPushCannotFit(t *testing.T) {
	env := map[string]string{}
	getenv := func(k string) string { return env[k] }

	s, err := LoadSettings(getenv)
	if err != nil {
		t.Fatalf("defaults: %v", err)
	}
	if s.HTTPTimeout+5*time.Second > PushActivityTimeout {
		t.Fatalf("the default HTTP timeout %s leaves no room in the push activity's %s", s.HTTPTimeout, PushActivityTimeout)
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
