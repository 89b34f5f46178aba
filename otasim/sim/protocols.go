package sim

import (
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/paritysync/paritysync/channels/wire"
	"github.com/paritysync/paritysync/models"
)

// generic reports whether ch speaks the paritysync protocol at {base}/ari.
func (ch *channel) generic() bool {
	return ch.cfg.Protocol == "" || ch.cfg.Protocol == models.ProtocolParitySync
}

// serveProtocol answers the Channex and OpenTravel endpoints; false when path is
// none of them.
func (s *Simulator) serveProtocol(w http.ResponseWriter, r *http.Request) bool {
	for _, ch := range s.bySlug { // immutable after New
		base := strings.TrimSuffix(ch.cfg.BasePath, "/")
		rest, ok := strings.CutPrefix(r.URL.Path, base)
		if !ok {
			continue
		}
		switch ch.cfg.Protocol {
		case models.ProtocolChannex:
			if rest == wire.ChannexRestrictionsPath || rest == wire.ChannexAvailabilityPath {
				s.serveChannex(w, r, ch, rest)
				return true
			}
		case models.ProtocolOpenTravel:
			if msg, ok := strings.CutPrefix(rest, wire.OTAPathPrefix); ok {
				s.serveOpenTravel(w, r, ch, msg)
				return true
			}
		}
	}
	return false
}

// handlePush is what the push handlers of every protocol share: one push read
// whole, counted, delayed by the latency faults, decided and recorded under s.mu.
// decide fills in rec what it learns of the request.
func (s *Simulator) handlePush(w http.ResponseWriter, r *http.Request, ch *channel,
	decide func(body []byte, readErr error, now time.Time, f Faults, rec *RequestRecord) reply) {
	body, readErr, f, ok := s.receive(w, r, ch)
	if !ok {
		return
	}
	s.mu.Lock()
	now := s.now()
	rec := RequestRecord{At: now, Channel: ch.cfg.Slug}
	late := ch.deferApplies(f)
	rep := decide(body, readErr, now, f, &rec)
	ch.deferred = nil
	rec.Status = rep.status
	s.record(rec)
	s.mu.Unlock()
	s.applyLate(ch, f, *late)
	rep.write(w)
}

// unitVersions reads HeaderUnitVersions: one version per unit (change object or
// message) of a body that has no place for versions. otasim needs them to keep its
// per-night version check on every protocol.
func unitVersions(h http.Header, units int) ([]int64, error) {
	raw := h.Get(models.HeaderUnitVersions)
	if raw == "" {
		return nil, fmt.Errorf("%s: required by otasim, one version per unit", models.HeaderUnitVersions)
	}
	parts := strings.Split(raw, ",")
	if len(parts) != units {
		return nil, fmt.Errorf("%s: %d versions for %d units", models.HeaderUnitVersions, len(parts), units)
	}
	vs := make([]int64, units)
	for i, p := range parts {
		v, err := strconv.ParseInt(strings.TrimSpace(p), 10, 64)
		if err != nil || v < 1 {
			return nil, fmt.Errorf("%s: version %d: want an integer >= 1", models.HeaderUnitVersions, i+1)
		}
		vs[i] = v
	}
	return vs, nil
}

// weekdays keeps the nights of from..to whose weekday is in days (Channex "days":
// mo, tu, we, th, fr, sa, su); every night when days is empty.
func weekdays(from, to models.Date, days []string) ([]models.Date, error) {
	names := map[string]time.Weekday{"mo": time.Monday, "tu": time.Tuesday, "we": time.Wednesday,
		"th": time.Thursday, "fr": time.Friday, "sa": time.Saturday, "su": time.Sunday}
	want := map[time.Weekday]bool{}
	for _, d := range days {
		wd, ok := names[strings.ToLower(d)]
		if !ok {
			return nil, fmt.Errorf("days: unknown day %q (want mo, tu, we, th, fr, sa, su)", d)
		}
		want[wd] = true
	}
	var out []models.Date
	for d := from; !d.After(to); d = d.AddDays(1) {
		if len(want) == 0 || want[d.Time().Weekday()] {
			out = append(out, d)
		}
	}
	return out, nil
}

// proxyPage is what a proxy in front of a channel answers when it has nothing better.
const proxyPage = `<!DOCTYPE html><html><head><title>Service Unavailable</title></head>` +
	`<body><h1>Gateway</h1><p>The upstream server is not answering.</p></body></html>`

// badBody draws the bad-body fault: a 200 that confirms nothing, in the shape
// f.BadBody names. answers gives the answer the channel would have given (truncated
// cuts it in half) and the protocol's error answer. Nothing is applied or
// remembered for replay.
func (s *Simulator) badBody(ch *channel, f Faults, answers func() (good, refusal reply)) (reply, bool) {
	if !s.roll(f.BadBodyRatio) {
		return reply{}, false
	}
	ch.stats.FaultsInjected++
	good, refusal := answers()
	rep := reply{status: http.StatusOK, header: http.Header{}}
	switch f.BadBody {
	case BadBodyEmpty:
		rep.header.Set("Content-Type", good.header.Get("Content-Type"))
	case BadBodyTruncated:
		rep.header, rep.body = good.header.Clone(), slices.Clone(good.body[:len(good.body)/2])
	case BadBodyError:
		rep = refusal.clone()
		rep.status = http.StatusOK
	default:
		rep.header.Set("Content-Type", "text/html; charset=utf-8")
		rep.body = []byte(proxyPage)
	}
	return rep, true
}
