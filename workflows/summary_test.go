package workflows

import (
	"testing"
	"time"

	"github.com/paritysync/paritysync/models"
)

func TestDeferralSummariesSayWhyTheyWait(t *testing.T) {
	for _, tc := range []struct {
		d    models.Deferral
		wait time.Duration
		want string
	}{
		{models.Deferral{Reason: "circuit breaker open"}, 30 * time.Second, "circuit breaker open on expedia: ask again in 30s"},
		{models.Deferral{}, 2500 * time.Millisecond, "expedia backing off: ask again in 2.5s"},
		{models.Deferral{}, 90 * time.Second, "expedia backing off: ask again in 1m30s"},
	} {
		if got := deferralSummary("expedia", tc.d, tc.wait); got != tc.want {
			t.Errorf("%+v: %q, want %q", tc.d, got, tc.want)
		}
	}
	if got := statusText(0) + " " + statusText(503); got != "no answer 503" {
		t.Errorf("status texts %q", got)
	}
}
