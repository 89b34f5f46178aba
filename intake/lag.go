package main

import (
	"net/http"
	"time"

	"github.com/paritysync/paritysync/activities/store"
)

// lagWindow is the window of the acknowledgement quantiles GET /v1/lag answers,
// as the worker's gauges and starter status read them.
const lagWindow = time.Hour

// channelLag is one channel's parity lag in GET /v1/lag.
type channelLag struct {
	Channel  string `json:"channel"`
	Property string `json:"property_id,omitempty"`
	// OldestSeconds is the age of the oldest desired change not acknowledged yet
	// (0 when nothing is owed).
	OldestSeconds float64 `json:"oldest_seconds"`
	// PendingUpdates are the open batches' updates still without an outcome on
	// the channel (per channel only).
	PendingUpdates int `json:"pending_updates"`
	// OwedCells are the property's cells (per night, room type, rate plan and
	// family, from yesterday on) whose desired version the channel has not
	// acknowledged (per property only).
	OwedCells    int     `json:"owed_cells"`
	AckedUpdates int     `json:"acked_updates"`
	P50Seconds   float64 `json:"p50_seconds"`
	P99Seconds   float64 `json:"p99_seconds"`
}

// lagView is GET /v1/lag.
type lagView struct {
	WindowSeconds float64      `json:"window_seconds"`
	Property      string       `json:"property_id,omitempty"`
	Channels      []channelLag `json:"channels"`
}

// getLag answers the parity lag from PostgreSQL: per channel (an operator's key:
// it sums every tenant's work), or of one property (?property=, a key that may
// write it), on every channel or one (?channel=). Every configured channel is
// listed, zeros where nothing is owed or acknowledged.
func (s *Server) getLag(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	property, channel := q.Get("property"), q.Get("channel")
	caller := callerOf(r.Context())
	switch {
	case property == "" && !caller.admin:
		writeProblem(w, r, http.StatusForbidden, probForbidden,
			"a channel's parity lag sums every tenant's work: it takes an operator key; ask for your property with ?property=")
		return
	case property != "" && !caller.mayWrite(property):
		writeProblem(w, r, http.StatusForbidden, probForbidden, "property "+property+" is not this key's")
		return
	}
	slugs := []string{channel}
	if channel == "" {
		slugs = slugs[:0]
		for _, c := range s.cfg.Channels {
			slugs = append(slugs, c.Slug)
		}
	} else if _, ok := s.channels[channel]; !ok {
		writeProblem(w, r, http.StatusNotFound, probNotFound, "no channel "+channel)
		return
	}
	lags, err := s.st.ParityLag(r.Context(), lagWindow, property)
	if err != nil {
		s.internal(w, r, err)
		return
	}
	by := map[string]store.ParityLag{}
	for _, l := range lags {
		by[l.Channel] = l
	}
	out := lagView{WindowSeconds: lagWindow.Seconds(), Property: property, Channels: make([]channelLag, 0, len(slugs))}
	for _, slug := range slugs {
		l := by[slug]
		out.Channels = append(out.Channels, channelLag{Channel: slug, Property: property, OldestSeconds: l.Oldest.Seconds(),
			PendingUpdates: l.Pending, OwedCells: l.OwedCells, AckedUpdates: l.Acked,
			P50Seconds: l.P50.Seconds(), P99Seconds: l.P99.Seconds()})
	}
	writeJSON(w, http.StatusOK, out)
}
