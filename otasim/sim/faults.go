package sim

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"time"

	"github.com/paritysync/paritysync/models"
)

// SetFaults replaces the injected faults; a storm starts now, or with
// StormFromFirstPush at the first push it meets.
func (s *Simulator) SetFaults(f Faults) error {
	if err := f.Validate(); err != nil {
		return fmt.Errorf("faults: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.setFaultsLocked(f)
	return nil
}

func (s *Simulator) setFaultsLocked(f Faults) {
	f.StormUntil = nil
	f.Channels = slices.Clone(f.Channels)
	s.faults = f
	s.stormUntil = time.Time{}
	if f.StormSeconds > 0 && !f.StormFromFirstPush {
		s.stormUntil = s.now().Add(time.Duration(f.StormSeconds) * time.Second)
	}
}

// inStorm reports whether a push at now, under the faults f that apply to its
// channel, arrives during a storm; the first push a StormFromFirstPush storm
// meets starts it. It runs under s.mu.
func (s *Simulator) inStorm(f Faults, now time.Time) bool {
	if f.StormSeconds <= 0 {
		return false
	}
	if s.stormUntil.IsZero() && s.faults.StormFromFirstPush {
		s.stormUntil = now.Add(time.Duration(s.faults.StormSeconds) * time.Second)
	}
	return now.Before(s.stormUntil)
}

// Faults are the faults in force, with StormUntil set while a storm lasts (not
// before a StormFromFirstPush storm has met its first push).
func (s *Simulator) Faults() Faults {
	s.mu.Lock()
	defer s.mu.Unlock()
	f := s.faults
	f.Channels = slices.Clone(f.Channels)
	if until := s.stormUntil; until.After(s.now()) {
		f.StormUntil = &until
	}
	return f
}

func (s *Simulator) serveFaults(w http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case http.MethodGet:
		writeJSON(w, http.StatusOK, s.Faults())
	case http.MethodPost:
		var f Faults
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 64<<10))
		if err == nil {
			err = strictUnmarshal(body, &f)
		}
		if err == nil {
			err = s.SetFaults(f)
		}
		if err != nil {
			writeJSON(w, http.StatusBadRequest, models.ARIError{Error: models.ErrorInvalid, Message: cleanJSONError(err)})
			return
		}
		writeJSON(w, http.StatusOK, s.Faults())
	default:
		allow(w, r, http.MethodGet, http.MethodPost)
	}
}

// receive counts a push, picks the faults that apply to it, delays it by the
// latency faults and reads its body; false means the client is gone. The body is
// read before taking the lock: a slow client must not stall others.
func (s *Simulator) receive(w http.ResponseWriter, r *http.Request, ch *channel) ([]byte, error, Faults, bool) {
	s.mu.Lock()
	ch.stats.Requests++
	f := s.faults
	if !f.appliesTo(ch.cfg.Slug) {
		f = Faults{}
	}
	if f.Hang || f.LatencyMS > 0 {
		ch.stats.FaultsInjected++
	}
	s.mu.Unlock()
	if !s.delay(r.Context(), f) {
		return nil, nil, f, false
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes))
	return body, err, f, true
}

// stormStatus is the status of a push that arrives during a storm the faults
// started, counted; 0 outside a storm.
func (s *Simulator) stormStatus(ch *channel, f Faults, now time.Time) int {
	if !s.inStorm(f, now) {
		return 0
	}
	ch.stats.FaultsInjected++
	status := f.StormStatus
	if status == 0 {
		status = http.StatusTooManyRequests
	}
	if status == http.StatusTooManyRequests {
		ch.stats.Throttled++
	} else {
		ch.stats.ServerErrors++
	}
	return status
}

// serverFault rolls a fault that answers a 5xx, at ratio: ErrorRatio before a push
// is applied, CommitThen500Ratio after it was applied and remembered. True,
// counted, when it strikes.
func (s *Simulator) serverFault(ch *channel, ratio float64) bool {
	if !s.roll(ratio) {
		return false
	}
	ch.stats.FaultsInjected++
	ch.stats.ServerErrors++
	return true
}

// serverStatus is a 5xx status, picked at random.
func (s *Simulator) serverStatus() int {
	statuses := []int{500, 502, 503, 504}
	return statuses[s.rng.IntN(len(statuses))]
}

// outcomeFaults rolls the drift and partial faults of a push that is to succeed:
// drift answers success and applies nothing, partial fails some of its units.
func (s *Simulator) outcomeFaults(ch *channel, f Faults) (drift, partial bool) {
	drift = s.roll(f.DriftRatio)
	partial = !drift && s.roll(f.PartialRatio)
	if drift || partial {
		ch.stats.FaultsInjected++
	}
	return drift, partial
}

// failsUnit rolls whether a partial fault fails unit i of n: each at even odds,
// and the last when none failed before, so a partial answer fails at least one.
func (s *Simulator) failsUnit(partial bool, i, n int, noneYet bool) bool {
	return partial && (s.rng.IntN(2) == 0 || i == n-1 && noneYet)
}

// delay applies the latency and hang faults; false means the client is gone.
func (s *Simulator) delay(ctx context.Context, f Faults) bool {
	if f.Hang {
		select {
		case <-ctx.Done():
		case <-s.closed:
		}
		return false
	}
	if f.LatencyMS > 0 {
		t := time.NewTimer(time.Duration(f.LatencyMS) * time.Millisecond)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return false
		case <-s.closed:
			return false
		}
	}
	return true
}

// roll draws one fault; a zero ratio draws nothing so unrelated faults do not shift
// the random sequence a test relies on.
func (s *Simulator) roll(ratio float64) bool {
	return ratio > 0 && s.rng.Float64() < ratio
}
