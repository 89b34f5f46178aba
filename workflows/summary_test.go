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

func TestThrottleAndRetrySummariesNameTheAnswer(t *testing.T) {
	if got := throttleSummary("expedia", models.Failure{ServerWait: true, Status: 429}, 20*time.Second); got != "Retry-After 20s from expedia" {
		t.Errorf("%q", got)
	}
	if got := throttleSummary("expedia", models.Failure{Status: 503}, 1300*time.Millisecond); got != "back-off 1.3s after 503 from expedia" {
		t.Errorf("%q", got)
	}
	if got := transientSummary("expedia", models.Failure{Status: 503}, 1300*time.Millisecond, 2, 5); got != "retry 2/5 in 1.3s after 503 from expedia" {
		t.Errorf("%q", got)
	}
}
