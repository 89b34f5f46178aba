package models

import (
	"encoding/json"
	"fmt"
	"time"
)

// Duration is a time.Duration that travels in workflow inputs and results as a Go
// duration string ("3.848s", "5m0s"), so the Temporal UI reads it; a number
// (nanoseconds, as histories recorded before hold) is read too.
type Duration time.Duration

// MarshalJSON writes d as a duration string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// UnmarshalJSON reads a duration string or a number of nanoseconds.
func (d *Duration) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		v, err := time.ParseDuration(s)
		if err != nil {
			return fmt.Errorf("duration %q: %w", s, err)
		}
		*d = Duration(v)
		return nil
	}
	var n int64
	if err := json.Unmarshal(b, &n); err != nil {
		return fmt.Errorf("duration: want a string such as \"1.5s\" or nanoseconds: %w", err)
	}
	*d = Duration(n)
	return nil
}

// retryPolicyJSON is RetryPolicy with its durations readable.
type retryPolicyJSON struct {
	plainRetryPolicy
	Initial Duration `json:"initial"`
	Max     Duration `json:"max"`
	MaxWait Duration `json:"max_wait"`
}

type plainRetryPolicy RetryPolicy

// MarshalJSON writes p's durations as duration strings.
func (p RetryPolicy) MarshalJSON() ([]byte, error) {
	return json.Marshal(retryPolicyJSON{plainRetryPolicy(p), Duration(p.Initial), Duration(p.Max), Duration(p.MaxWait)})
}

// UnmarshalJSON reads durations as strings or nanoseconds.
func (p *RetryPolicy) UnmarshalJSON(b []byte) error {
	var v retryPolicyJSON
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*p = RetryPolicy(v.plainRetryPolicy)
	p.Initial, p.Max, p.MaxWait = time.Duration(v.Initial), time.Duration(v.Max), time.Duration(v.MaxWait)
	return nil
}

type plainSlot Slot

// slotJSON is Slot with its wait readable.
type slotJSON struct {
	plainSlot
	Wait Duration `json:"wait"`
}

// MarshalJSON writes the wait as a duration string.
func (s Slot) MarshalJSON() ([]byte, error) {
	return json.Marshal(slotJSON{plainSlot(s), Duration(s.Wait)})
}

// UnmarshalJSON reads the wait as a string or nanoseconds.
func (s *Slot) UnmarshalJSON(b []byte) error {
	var v slotJSON
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*s = Slot(v.plainSlot)
	s.Wait = time.Duration(v.Wait)
	return nil
}

// Deferral is a push the limiter did not let go yet (a slot held for later, a
// pause, a back-off, an open breaker): wait, then ask again. PushRequest answers it
// as a result, not a failure, so normal pacing never shows as a failed activity.
type Deferral struct {
	Wait Duration `json:"wait"`
	// Held is set when the wait is for a slot the limiter holds for the request.
	Held bool `json:"held,omitempty"`
	// Paused is the operator's reason while the channel is paused.
	Paused string `json:"paused,omitempty"`
	Tier   string `json:"tier,omitempty"`
	// Reason names a wait that is neither: "circuit breaker open", a back-off.
	Reason string `json:"reason,omitempty"`
}

// Summary is a one-line description of r in the domain's words, for the Temporal
// UI: "push rates prop_0000abcd 2027-03-01..03-31, 12 lines".
func (r ChannelRequest) Summary() string {
	if len(r.Lines) == 0 {
		return fmt.Sprintf("push %s %s, no lines", r.Family, r.PropertyID)
	}
	from, to := r.Lines[0].From, r.Lines[0].To
	for _, l := range r.Lines[1:] {
		if l.From.Before(from) {
			from = l.From
		}
		if to.Before(l.To) {
			to = l.To
		}
	}
	lines := "lines"
	if len(r.Lines) == 1 {
		lines = "line"
	}
	return fmt.Sprintf("push %s %s %s, %d %s", r.Family, r.PropertyID, NightsSummary(from, to), len(r.Lines), lines)
}

// NightsSummary is the nights from..to, short: "2027-03-01", "2027-03-01..03-31",
// "2027-12-20..2028-01-04".
func NightsSummary(from, to Date) string {
	switch {
	case from == to:
		return from.String()
	case from.Year == to.Year:
		return fmt.Sprintf("%s..%02d-%02d", from, int(to.Month), to.Day)
	}
	return fmt.Sprintf("%s..%s", from, to)
}
