package sim

import (
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/shopspring/decimal"

	"github.com/paritysync/paritysync/channels/wire"
	"github.com/paritysync/paritysync/models"
)

// Channex in the simulator: the change objects of /api/v1/restrictions and
// /api/v1/availability, the user-api-key header, a limit of RatePerMinute requests
// per property and endpoint in any window (60 s unless configured), a 429 with Channex's JSON body and no
// headers, refused change objects reported under meta.warnings of a 200 while the
// others apply, and the read-back GETs.

// channexMaxValues bounds the change objects of one request (Channex bounds the
// body at 10 MB instead; this keeps the simulator's memory small).
const channexMaxValues = 10000

func (s *Simulator) serveChannex(w http.ResponseWriter, r *http.Request, ch *channel, endpoint string) {
	switch r.Method {
	case http.MethodPost:
		s.handlePush(w, r, ch, func(body []byte, readErr error, now time.Time, f Faults, _ *RequestRecord) reply {
			return s.channexPush(ch, r, endpoint, body, readErr, now, f)
		})
	case http.MethodGet:
		s.mu.Lock()
		rep := s.channexRead(ch, r, endpoint)
		s.mu.Unlock()
		rep.write(w)
	default:
		w.Header().Set("Allow", "GET, POST")
		channexError(http.StatusMethodNotAllowed, "method_not_allowed", "Method Not Allowed", nil).write(w)
	}
}

func channexError(status int, code, title string, details any) reply {
	e := &wire.ChannexError{Code: code, Title: title}
	if details != nil {
		e.Details, _ = json.Marshal(details)
	}
	return jsonReply(status, wire.ChannexResponse{Errors: e})
}

func channexInvalid(msg string) reply {
	return channexError(http.StatusUnprocessableEntity, "validation_error", "Validation Error", map[string]string{"body": msg})
}

// channexPush decides one POST under s.mu.
func (s *Simulator) channexPush(ch *channel, r *http.Request, endpoint string, body []byte, readErr error, now time.Time, f Faults) reply {
	if !s.tokenValid(r.Header.Get(wire.ChannexAPIKeyHeader), now) {
		ch.stats.AuthFailures++
		return channexError(http.StatusUnauthorized, "unauthorized", "Unauthorized", nil)
	}
	if readErr != nil {
		ch.stats.Invalid++
		var tooBig *http.MaxBytesError
		if errors.As(readErr, &tooBig) {
			return channexError(http.StatusRequestEntityTooLarge, "payload_too_large", "Payload Too Large", nil)
		}
		return channexInvalid("unreadable")
	}
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		ch.stats.Invalid++
		return channexError(http.StatusUnsupportedMediaType, "unsupported_media_type", "Content-Type: want application/json", nil)
	}
	units, err := decodeChannex(ch.cfg.Channex, endpoint, body)
	if err == nil {
		var versions []int64
		if versions, err = unitVersions(r.Header, len(units)); err == nil {
			for i := range units {
				units[i].version = versions[i]
			}
		}
	}
	if err != nil {
		ch.stats.Invalid++
		return channexInvalid(err.Error())
	}

	key := units[0].property + "|" + endpoint
	ch.arrive(key, now)
	if s.inStorm(f, now) {
		ch.stats.FaultsInjected++
		if f.StormStatus == http.StatusServiceUnavailable {
			ch.stats.ServerErrors++
			return ch.throttle(key, http.StatusServiceUnavailable, s.stormUntil.Sub(now), now)
		}
		ch.stats.Throttled++
		return channexError(http.StatusTooManyRequests, wire.ChannexTooManyRequests, "Too Many Requests", nil)
	}
	win := ch.window(ch.windows, key)
	if win.count(now) >= ch.cfg.RatePerMinute {
		ch.stats.Throttled++
		// Channex says nothing about when to come back.
		return channexError(http.StatusTooManyRequests, wire.ChannexTooManyRequests, "Too Many Requests", nil)
	}
	win.add(now)

	idemKey := r.Header.Get(models.HeaderIdempotencyKey)
	if idemKey != "" {
		if rep, seen, conflict := ch.replay(idemKey, body, now, s.cfg.IdempotencyTTL); conflict {
			ch.stats.Invalid++
			return channexInvalid(models.HeaderIdempotencyKey + ": reused with a different body")
		} else if seen {
			return rep
		}
	}
	if s.serverFault(ch, f.ErrorRatio) {
		return channexError(s.serverStatus(), "internal_server_error", "Internal Server Error", nil)
	}

	if rep, bad := s.badBody(ch, f, func() (reply, reply) {
		good := jsonReply(http.StatusOK, wire.ChannexResponse{Data: []wire.ChannexTask{{ID: uuid.NewString(), Type: "task"}},
			Meta: &wire.ChannexMeta{Message: "Success"}})
		return good, channexInvalid("injected error inside a 200")
	}); bad {
		return rep
	}

	drift, injected := s.outcomeFaults(ch, f)
	var warnings []wire.ChannexWarning
	for i, u := range units {
		problem := u.problem
		if problem == "" && ch.cfg.Channex.Properties != nil {
			problem = channexUnknownID(ch.cfg.Channex, u)
		}
		if problem == "" && s.failsUnit(injected, i, len(units), len(warnings) == 0) {
			problem = "injected change object failure"
		}
		if problem != "" {
			warnings = append(warnings, u.warning(problem))
			continue
		}
		if !drift {
			u.apply(ch)
		}
	}
	resp := wire.ChannexResponse{Data: []wire.ChannexTask{}, Meta: &wire.ChannexMeta{Message: "Success", Warnings: warnings}}
	if len(warnings) < len(units) {
		resp.Data = append(resp.Data, wire.ChannexTask{ID: uuid.NewString(), Type: "task"})
	}
	if len(warnings) == 0 {
		ch.stats.Accepted++
	} else {
		ch.stats.Partial++
	}
	rep := jsonReply(http.StatusOK, resp)
	if idemKey != "" {
		ch.remember(idemKey, body, rep, now)
	}
	if s.serverFault(ch, f.CommitThen500Ratio) {
		return channexError(http.StatusInternalServerError, "internal_server_error", "Internal Server Error", nil)
	}
	return rep
}

// channexUnit is one decoded change object; problem is why it is refused.
type channexUnit struct {
	property string
	// id is the rate plan id (restrictions) or room type id (availability).
	id       string
	endpoint string
	date     models.Date
	from, to models.Date
	nights   []models.Date
	line     models.ARILine // values only
	version  int64
	problem  string
}

func (u channexUnit) warning(msg string) wire.ChannexWarning {
	w := wire.ChannexWarning{PropertyID: u.property, Date: u.date, DateFrom: u.from, DateTo: u.to}
	if u.endpoint == wire.ChannexAvailabilityPath {
		w.RoomTypeID = u.id
	} else {
		w.RatePlanID = u.id
	}
	w.Warning, _ = json.Marshal(msg)
	return w
}

// apply writes the unit's nights; a change object with a rate and restrictions is a
// rates line and a restrictions line, each judged against its own version.
func (u channexUnit) apply(ch *channel) {
	write := func(fam models.Family, l models.ARILine) {
		l.Version = u.version
		if u.endpoint == wire.ChannexAvailabilityPath {
			l.RoomTypeCode = u.id
		} else {
			l.RatePlanCode = u.id
		}
		stale := false
		for _, d := range u.nights {
			l.From, l.To = d, d
			stale = ch.receiveLine(u.property, fam, l) || stale
			ch.apply(u.property, fam, l)
		}
		if stale {
			ch.stats.StaleReceived++
		}
	}
	l := u.line
	switch {
	case u.endpoint == wire.ChannexAvailabilityPath:
		write(models.FamilyAvailability, models.ARILine{Values: l.Of(models.FamilyAvailability)})
	default:
		// Prices and restrictions share /restrictions: one change object may set both.
		for _, f := range []models.Family{models.FamilyRates, models.FamilyRestrictions} {
			if l.Sets(f) {
				write(f, models.ARILine{Values: l.Of(f)})
			}
		}
	}
}

// decodeChannex reads a body strictly: a malformed body is a 422 for the whole
// request; a change object that breaks a rule only gets its problem set.
func decodeChannex(m models.ChannexMapping, endpoint string, body []byte) ([]channexUnit, error) {
	var top struct {
		Values []json.RawMessage `json:"values"`
	}
	if err := strictUnmarshal(body, &top); err != nil {
		return nil, fmt.Errorf("%s", cleanJSONError(err))
	}
	if len(top.Values) == 0 || len(top.Values) > channexMaxValues {
		return nil, fmt.Errorf("values: 1..%d change objects required", channexMaxValues)
	}
	units := make([]channexUnit, len(top.Values))
	for i, raw := range top.Values {
		u := channexUnit{endpoint: endpoint}
		var dateFields struct{ date, from, to models.Date }
		var days []string
		if endpoint == wire.ChannexAvailabilityPath {
			var v wire.ChannexAvailability
			if err := strictUnmarshal(raw, &v); err != nil {
				return nil, fmt.Errorf("values[%d]: %s", i, cleanJSONError(err))
			}
			u.property, u.id, u.line.Inventory = v.PropertyID, v.RoomTypeID, v.Availability
			dateFields.date, dateFields.from, dateFields.to = v.Date, v.DateFrom, v.DateTo
			if v.Availability == nil {
				u.problem = "availability: required"
			} else if *v.Availability < 0 || *v.Availability > maxInventory {
				u.problem = fmt.Sprintf("availability: must be in 0..%d", maxInventory)
			}
		} else {
			var v wire.ChannexRestriction
			if err := strictUnmarshal(raw, &v); err != nil {
				return nil, fmt.Errorf("values[%d]: %s", i, cleanJSONError(err))
			}
			u.property, u.id, days = v.PropertyID, v.RatePlanID, v.Days
			dateFields.date, dateFields.from, dateFields.to = v.Date, v.DateFrom, v.DateTo
			u.line = models.ARILine{Values: models.Values{StopSell: v.StopSell, MinLOS: v.MinStayArrival, MaxLOS: v.MaxStay,
				CTA: v.ClosedToArrival, CTD: v.ClosedToDeparture}}
			u.problem = channexRestrictionProblem(m, v, &u.line)
		}
		if u.property == "" {
			return nil, fmt.Errorf("values[%d].property_id: required", i)
		}
		if i > 0 && u.property != units[0].property {
			return nil, fmt.Errorf("values[%d].property_id: one property per request in otasim", i)
		}
		u.date, u.from, u.to = dateFields.date, dateFields.from, dateFields.to
		switch {
		case u.id == "":
			u.problem = "rate_plan_id or room_type_id: required"
		case !u.date.IsZero() && (!u.from.IsZero() || !u.to.IsZero()):
			u.problem = "date: not together with date_from/date_to"
		case u.date.IsZero() && (u.from.IsZero() || u.to.IsZero()):
			u.problem = "date or date_from and date_to: required"
		case !u.date.IsZero():
			u.nights = []models.Date{u.date}
		case u.to.Before(u.from):
			u.problem = "date_to: before date_from"
		default:
			nights, err := weekdays(u.from, u.to, days)
			if err != nil {
				u.problem = err.Error()
			}
			u.nights = nights
		}
		units[i] = u
	}
	return units, nil
}

// channexRestrictionProblem checks one restrictions change object and fills the rate
// into l. Channex knows each rate plan's currency; the simulator knows it when its
// channel has a mapping, and otherwise bounds places by the most any currency has.
func channexRestrictionProblem(m models.ChannexMapping, v wire.ChannexRestriction, l *models.ARILine) string {
	if v.Rate != "" {
		amt, err := decimal.NewFromString(v.Rate)
		if err != nil {
			return "rate: not a decimal"
		}
		if err := validAmountAnyPlaces(amt); err != nil {
			return "rate: " + err.Error()
		}
		if cur := channexCurrency(m, v.PropertyID); cur != "" {
			if err := validAmount(amt, cur); err != nil {
				return "rate: " + err.Error()
			}
		} else if !amt.Equal(amt.Round(3)) {
			return "rate: at most 3 decimal places"
		}
		l.Amount = &amt
	}
	switch {
	case v.MinStayArrival != nil && (*v.MinStayArrival < 1 || *v.MinStayArrival > maxLOS):
		return fmt.Sprintf("min_stay_arrival: must be in 1..%d", maxLOS)
	case v.MinStayThrough != nil:
		return "min_stay_through: not supported by otasim"
	case v.MaxStay != nil && (*v.MaxStay < 1 || *v.MaxStay > maxLOS):
		return fmt.Sprintf("max_stay: must be in 1..%d", maxLOS)
	case v.MinStayArrival != nil && v.MaxStay != nil && *v.MinStayArrival > *v.MaxStay:
		return "max_stay: below min_stay_arrival"
	case v.Rate == "" && v.StopSell == nil && v.MinStayArrival == nil && v.MaxStay == nil &&
		v.ClosedToArrival == nil && v.ClosedToDeparture == nil:
		return "nothing to change"
	}
	return ""
}

func channexCurrency(m models.ChannexMapping, property string) string {
	for _, p := range m.Properties {
		if p.PropertyID == property {
			return p.Currency
		}
	}
	return ""
}

// channexUnknownID refuses ids that the channel's mapping does not know, when the
// simulator is given one.
func channexUnknownID(m models.ChannexMapping, u channexUnit) string {
	for _, p := range m.Properties {
		if p.PropertyID != u.property {
			continue
		}
		ids := p.RatePlans
		if u.endpoint == wire.ChannexAvailabilityPath {
			ids = p.RoomTypes
		}
		for _, id := range ids {
			if id == u.id {
				return ""
			}
		}
		return "id: unknown in this property"
	}
	return "property_id: unknown"
}

// channexRead answers the read-back GETs, unlimited like the generic read.
func (s *Simulator) channexRead(ch *channel, r *http.Request, endpoint string) reply {
	if !s.tokenValid(r.Header.Get(wire.ChannexAPIKeyHeader), s.now()) {
		ch.stats.AuthFailures++
		return channexError(http.StatusUnauthorized, "unauthorized", "Unauthorized", nil)
	}
	q := r.URL.Query()
	prop := q.Get("filter[property_id]")
	from, err1 := models.ParseDate(q.Get("filter[date][gte]"))
	to, err2 := models.ParseDate(q.Get("filter[date][lte]"))
	switch {
	case prop == "":
		return channexInvalid("filter[property_id]: required")
	case err1 != nil || err2 != nil:
		return channexInvalid("filter[date][gte] and filter[date][lte]: YYYY-MM-DD required")
	case to.Before(from) || to.DaysSince(from) >= maxStateNights:
		return channexInvalid(fmt.Sprintf("filter[date]: at most %d nights", maxStateNights))
	}
	in := func(d models.Date) bool { return !d.Before(from) && !d.After(to) }
	if endpoint == wire.ChannexAvailabilityPath {
		st := wire.ChannexAvailabilityState{Data: map[string]map[models.Date]int{}}
		for k, c := range ch.cells[prop] {
			if k.room != "" && in(k.date) && c.cell.Inventory != nil {
				if st.Data[k.room] == nil {
					st.Data[k.room] = map[models.Date]int{}
				}
				st.Data[k.room][k.date] = *c.cell.Inventory
			}
		}
		return jsonReply(http.StatusOK, st)
	}
	want := strings.Split(q.Get("filter[restrictions]"), ",")
	if q.Get("filter[restrictions]") == "" {
		return channexInvalid("filter[restrictions]: required")
	}
	has := func(name string) bool { return slices.Contains(want, name) }
	st := wire.ChannexRestrictionsState{Data: map[string]map[models.Date]wire.ChannexDay{}}
	for k, c := range ch.cells[prop] {
		if k.rate == "" || !in(k.date) {
			continue
		}
		var d wire.ChannexDay
		if has("rate") && c.cell.Amount != nil {
			d.Rate = c.cell.Amount.String()
		}
		if has("stop_sell") {
			d.StopSell = c.cell.StopSell
		}
		if has("min_stay_arrival") {
			d.MinStayArrival = c.cell.MinLOS
		}
		if has("max_stay") {
			d.MaxStay = c.cell.MaxLOS
		}
		if has("closed_to_arrival") {
			d.ClosedToArrival = c.cell.CTA
		}
		if has("closed_to_departure") {
			d.ClosedToDeparture = c.cell.CTD
		}
		if st.Data[k.rate] == nil {
			st.Data[k.rate] = map[models.Date]wire.ChannexDay{}
		}
		st.Data[k.rate][k.date] = d
	}
	return jsonReply(http.StatusOK, st)
}
