package sim

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/paritysync/paritysync/models"
)

// maxStateNights bounds the date range of one GET of channel state.
const maxStateNights = 1000

func (s *Simulator) serveState(w http.ResponseWriter, r *http.Request, ch *channel) {
	s.mu.Lock()
	now := s.now()
	rep, key := s.state(ch, r, now)
	ch.rateHeaders(key, now, rep.header)
	s.mu.Unlock()
	rep.write(w)
}

// state answers GET {base}/ari, and the limit key it counted in. Reads count in
// the same sliding window as pushes, as on channels that meter every call: a read
// over the limit is a 429 with Retry-After.
func (s *Simulator) state(ch *channel, r *http.Request, now time.Time) (reply, string) {
	if !s.authorized(r.Header.Get("Authorization"), now) {
		ch.stats.AuthFailures++
		return errorReply(http.StatusUnauthorized, models.ErrorUnauthorized, "bearer token missing, unknown or expired"), ""
	}
	q := r.URL.Query()
	prop := q.Get("property_id")
	if prop == "" {
		return errorReply(http.StatusBadRequest, models.ErrorInvalid, "property_id: required"), ""
	}
	from, err := models.ParseDate(q.Get("from"))
	if err != nil {
		return errorReply(http.StatusBadRequest, models.ErrorInvalid, "from: "+err.Error()), ""
	}
	to, err := models.ParseDate(q.Get("to"))
	if err != nil {
		return errorReply(http.StatusBadRequest, models.ErrorInvalid, "to: "+err.Error()), ""
	}
	if to.Before(from) || to.DaysSince(from) >= maxStateNights {
		return errorReply(http.StatusBadRequest, models.ErrorInvalid,
			fmt.Sprintf("to: must be within %d nights on or after from", maxStateNights)), ""
	}
	key := ch.limitKey(prop)
	ch.arrive(key, now)
	win := ch.window(ch.windows, key)
	if win.count(now) >= ch.cfg.RatePerMinute {
		ch.stats.Throttled++
		return ch.throttle(key, http.StatusTooManyRequests, win.nextFree(now), now), key
	}
	win.add(now)
	ch.stats.Reads++
	st := models.ARIState{PropertyID: prop, Cells: []models.ARICell{}}
	for k, c := range ch.cells[prop] {
		if !k.date.Before(from) && !k.date.After(to) {
			st.Cells = append(st.Cells, c.cell)
		}
	}
	slices.SortFunc(st.Cells, func(a, b models.ARICell) int {
		if c := strings.Compare(a.RoomTypeCode, b.RoomTypeCode); c != 0 {
			return c
		}
		if c := strings.Compare(a.RatePlanCode, b.RatePlanCode); c != 0 {
			return c
		}
		return a.Date.Time().Compare(b.Date.Time())
	})
	return jsonReply(http.StatusOK, st), key
}
