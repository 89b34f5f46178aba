package sim

import (
	"net/http"
	"time"

	"github.com/paritysync/paritysync/models"
)

// RequestRecord is one push as the channel saw it, for benchmarks and tests that
// measure arrival rates and latencies from the channel's side.
type RequestRecord struct {
	At       time.Time     `json:"at"`
	Channel  string        `json:"channel"`
	Property string        `json:"property,omitempty"`
	Family   models.Family `json:"family,omitempty"`
	Lines    int           `json:"lines"`
	Nights   int           `json:"nights"`
	Status   int           `json:"status"`
}

// record appends r to the log, dropping the oldest record when it is full; s.mu held.
func (s *Simulator) record(r RequestRecord) {
	if len(s.log) >= s.cfg.MaxLogRecords {
		n := copy(s.log, s.log[len(s.log)-s.cfg.MaxLogRecords+1:])
		s.log = s.log[:n]
	}
	s.log = append(s.log, r)
}

// Requests is the log of pushes that arrived at or after since (the zero time for
// all), optionally only those to channel, oldest first.
func (s *Simulator) Requests(channel string, since time.Time) []RequestRecord {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := []RequestRecord{}
	for _, r := range s.log {
		if r.At.Before(since) || (channel != "" && r.Channel != channel) {
			continue
		}
		out = append(out, r)
	}
	return out
}

// serveRequests answers GET /requests?channel=&since=RFC3339.
func (s *Simulator) serveRequests(w http.ResponseWriter, r *http.Request) {
	var since time.Time
	if v := r.URL.Query().Get("since"); v != "" {
		t, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			writeJSON(w, http.StatusBadRequest, models.ARIError{Error: models.ErrorInvalid,
				Message: "since: want an RFC 3339 time"})
			return
		}
		since = t
	}
	writeJSON(w, http.StatusOK, s.Requests(r.URL.Query().Get("channel"), since))
}
