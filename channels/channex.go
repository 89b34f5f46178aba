package channels

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/shopspring/decimal"

	"github.com/paritysync/paritysync/channels/wire"
	"github.com/paritysync/paritysync/models"
)

// channex is the Channex API: change objects under {"values": [...]}, rates and
// restrictions on /api/v1/restrictions, availability on /api/v1/availability, the
// API key in user-api-key, refused change objects in meta.warnings of a 200, and a
// 429 without Retry-After or rate-limit headers. Its limits are per property, which
// the channel's scope (property) and shares carry to the limiter.
type channex struct{}

func (channex) encode(cfg models.ChannelConfig, req models.ChannelRequest, _ time.Time) (call, error) {
	prop, ok := cfg.Channex.Properties[req.PropertyID]
	if !ok {
		return call{}, fmt.Errorf("property %s: no Channex id in channel %s", req.PropertyID, cfg.Slug)
	}
	c := call{method: http.MethodPost, contentType: "application/json", versions: make([]int64, len(req.Lines))}
	for i, l := range req.Lines {
		c.versions[i] = l.Version
	}
	var err error
	if models.ChannexEndpoint(req.Family) == models.ChannexAvailability {
		c.path = wire.ChannexAvailabilityPath
		body := wire.ChannexValues[wire.ChannexAvailability]{Values: make([]wire.ChannexAvailability, len(req.Lines))}
		for i, l := range req.Lines {
			id, ok := prop.RoomTypes[l.RoomTypeCode]
			if !ok {
				return call{}, fmt.Errorf("lines[%d]: room type %s has no Channex id", i, l.RoomTypeCode)
			}
			v := wire.ChannexAvailability{PropertyID: prop.PropertyID, RoomTypeID: id, Availability: l.Inventory}
			v.Date, v.DateFrom, v.DateTo = dateRange(l)
			body.Values[i] = v
		}
		c.body, err = json.Marshal(body)
		return c, checkChannexSize(c, err)
	}
	c.path = wire.ChannexRestrictionsPath
	body := wire.ChannexValues[wire.ChannexRestriction]{Values: make([]wire.ChannexRestriction, len(req.Lines))}
	for i, l := range req.Lines {
		id, ok := prop.RatePlans[models.RatePlanKey(l.RoomTypeCode, l.RatePlanCode)]
		if !ok {
			return call{}, fmt.Errorf("lines[%d]: rate plan %s/%s has no Channex id", i, l.RoomTypeCode, l.RatePlanCode)
		}
		v := wire.ChannexRestriction{PropertyID: prop.PropertyID, RatePlanID: id, StopSell: l.StopSell,
			MinStayArrival: l.MinLOS, MaxStay: l.MaxLOS, ClosedToArrival: l.CTA, ClosedToDeparture: l.CTD}
		if l.Amount != nil {
			if l.Currency != prop.Currency {
				return call{}, fmt.Errorf("lines[%d]: currency %s, the Channex property prices in %s", i, l.Currency, prop.Currency)
			}
			if !models.FitsMinorUnits(*l.Amount, l.Currency) {
				return call{}, fmt.Errorf("lines[%d]: amount %s has more places than %s allows", i, l.Amount, l.Currency)
			}
			v.Rate = models.FormatAmount(*l.Amount, l.Currency)
		}
		v.Date, v.DateFrom, v.DateTo = dateRange(l)
		v.Days = channexDays(l.Days)
		body.Values[i] = v
	}
	c.body, err = json.Marshal(body)
	return c, checkChannexSize(c, err)
}

// checkChannexSize refuses a body Channex would refuse; max_lines_per_request keeps
// real requests far below it.
func checkChannexSize(c call, err error) error {
	if err != nil {
		return err
	}
	if len(c.body) > wire.ChannexMaxBodyBytes {
		return fmt.Errorf("body of %d bytes, Channex takes at most %d: lower max_lines_per_request", len(c.body), wire.ChannexMaxBodyBytes)
	}
	return nil
}

func (channex) authorize(h http.Header, secret string) {
	h.Set(wire.ChannexAPIKeyHeader, secret)
	h.Set("Accept", "application/json")
}

func (channex) interpret(out *PushResponse, c call, _ http.Header, raw []byte) {
	resp, err := decodeChannexResponse(raw)
	if !is2xx(out.Status) {
		out.Class = byStatus(out.Status, out.ServerWait)
		if err == nil && resp.Errors != nil {
			out.Message = channexErrorText(resp.Errors)
		} else {
			out.Message = bodyText(out.Status, raw)
		}
		return
	}
	if objErr := jsonObject(raw); objErr != nil {
		err = objErr
	}
	var foreign models.ARIError
	if err == nil {
		_ = json.Unmarshal(raw, &foreign) // a JSON object: fields of other types stay empty
	}
	switch {
	case err != nil:
		// Whether the update was queued is unknown; sending the same values again
		// is harmless, so retry.
		out.Class, out.Message = ClassTransient, unreadable(err, raw)
		return
	case resp.Errors != nil:
		out.Class, out.Message = ClassRejected, channexErrorText(resp.Errors)
		return
	case foreign.Error != "" || foreign.Message != "":
		// Not Channex's error shape: a proxy or gateway speaking, so the update may
		// never have reached Channex.
		out.Class, out.Message = ClassTransient, "error inside a 200: "+ariMessage(out.Status, foreign, raw)
		return
	}
	if len(resp.Data) > 0 {
		out.ConfirmationID = resp.Data[0].ID
	}
	failed := map[int]LineFailure{}
	if resp.Meta != nil {
		for _, w := range resp.Meta.Warnings {
			msg := truncate(strings.TrimSpace(warningText(w.Warning)))
			units := matchWarning(c, w)
			if len(units) == 0 {
				// A warning we cannot place: every line is in doubt, so none is
				// acknowledged; parked lines are replayable and reconciliation
				// repairs what did apply.
				for u := range c.nUnits() {
					units = append(units, u)
				}
			}
			for _, u := range units {
				l := c.line(u)
				if _, dup := failed[l]; !dup {
					failed[l] = LineFailure{Line: l, Code: "warning", Message: msg}
				}
			}
		}
	}
	out.Accepted = c.lines - len(failed)
	for _, l := range slices.Sorted(maps.Keys(failed)) {
		out.Failed = append(out.Failed, failed[l])
	}
	switch {
	case out.Accepted > 0 && out.ConfirmationID == "":
		// Channex answers an update it queued with the task that applies it; an
		// answer without one confirms nothing.
		out.Class, out.Accepted, out.Failed = ClassTransient, 0, nil
		out.Message = "answer without a task: " + bodyText(out.Status, raw)
	default:
		out.classifyFailed("change object")
	}
}

// decodeChannexResponse reads a Channex answer.
func decodeChannexResponse(raw []byte) (wire.ChannexResponse, error) {
	var resp wire.ChannexResponse
	if err := json.Unmarshal(raw, &resp); err != nil {
		return wire.ChannexResponse{}, err
	}
	return resp, nil
}

// matchWarning finds the change objects a warning names: by the echoed rate plan or
// room type id and dates. Channex applies change objects in order and they may
// repeat, so every match counts.
func matchWarning(c call, w wire.ChannexWarning) []int {
	if c.body == nil {
		return nil
	}
	switch {
	case w.RatePlanID != "":
		return matchValues(c.body, func(v wire.ChannexRestriction) bool {
			return v.RatePlanID == w.RatePlanID && v.Date == w.Date && v.DateFrom == w.DateFrom && v.DateTo == w.DateTo
		})
	case w.RoomTypeID != "":
		return matchValues(c.body, func(v wire.ChannexAvailability) bool {
			return v.RoomTypeID == w.RoomTypeID && v.Date == w.Date && v.DateFrom == w.DateFrom && v.DateTo == w.DateTo
		})
	}
	return nil
}

// matchValues is the index of every change object of body that match accepts.
func matchValues[T any](body []byte, match func(T) bool) []int {
	var values wire.ChannexValues[T]
	if json.Unmarshal(body, &values) != nil {
		return nil
	}
	var units []int
	for i, v := range values.Values {
		if match(v) {
			units = append(units, i)
		}
	}
	return units
}

// warningText renders a warning given as a string or as {field: [messages]}.
func warningText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var fields map[string][]string
	if json.Unmarshal(raw, &fields) == nil {
		parts := make([]string, 0, len(fields))
		for _, k := range slices.Sorted(maps.Keys(fields)) {
			parts = append(parts, k+": "+strings.Join(fields[k], ", "))
		}
		return strings.Join(parts, "; ")
	}
	return string(raw)
}

func channexErrorText(e *wire.ChannexError) string {
	msg := e.Code
	if e.Title != "" {
		msg += ": " + e.Title
	}
	if len(e.Details) > 0 {
		msg += " " + string(e.Details)
	}
	return truncate(strings.TrimSpace(msg))
}

func (channex) readBack(ctx context.Context, r reader, property string, from, to models.Date) (models.ARIState, error) {
	cfg := r.ch.cfg
	prop, ok := cfg.Channex.Properties[property]
	if !ok {
		return models.ARIState{}, fmt.Errorf("read %s state: property %s has no Channex id", cfg.Slug, property)
	}
	q := url.Values{
		"filter[property_id]": {prop.PropertyID},
		"filter[date][gte]":   {from.String()},
		"filter[date][lte]":   {to.String()},
	}
	var avail wire.ChannexAvailabilityState
	if err := r.get(ctx, "read "+cfg.Slug+" availability", wire.ChannexAvailabilityPath, q,
		func(b []byte) error { return json.Unmarshal(b, &avail) }); err != nil {
		return models.ARIState{}, err
	}
	q.Set("filter[restrictions]", wire.ChannexReadRestrictions)
	var restr wire.ChannexRestrictionsState
	if err := r.get(ctx, "read "+cfg.Slug+" restrictions", wire.ChannexRestrictionsPath, q,
		func(b []byte) error { return json.Unmarshal(b, &restr) }); err != nil {
		return models.ARIState{}, err
	}

	type key struct {
		room, plan string
		date       models.Date
	}
	cells := map[key]*models.ARICell{}
	cell := func(room, plan string, d models.Date) *models.ARICell {
		k := key{room, plan, d}
		if cells[k] == nil {
			cells[k] = &models.ARICell{RoomTypeCode: room, RatePlanCode: plan, Date: d}
		}
		return cells[k]
	}
	for rp, id := range prop.RatePlans {
		room, plan, _ := strings.Cut(rp, "/")
		for d, day := range restr.Data[id] {
			c := cell(room, plan, d)
			if day.Rate != "" {
				amt, err := decimal.NewFromString(day.Rate)
				if err != nil {
					return models.ARIState{}, fmt.Errorf("read %s restrictions: rate plan %s on %s: rate %q: %w", cfg.Slug, id, d, day.Rate, err)
				}
				c.Amount, c.Currency = &amt, prop.Currency
			}
			c.StopSell, c.MinLOS, c.MaxLOS, c.CTA, c.CTD = day.StopSell, day.MinStayArrival, day.MaxStay, day.ClosedToArrival, day.ClosedToDeparture
		}
		// Channex holds availability per room type; each of its rate plans sells it.
		for d, n := range avail.Data[prop.RoomTypes[room]] {
			c := cell(room, plan, d)
			c.Inventory = &n
		}
	}
	st := models.ARIState{PropertyID: property, Cells: make([]models.ARICell, 0, len(cells))}
	for _, c := range cells {
		if !c.Date.Before(from) && !c.Date.After(to) {
			st.Cells = append(st.Cells, *c)
		}
	}
	slices.SortFunc(st.Cells, func(a, b models.ARICell) int {
		return strings.Compare(a.RoomTypeCode+"/"+a.RatePlanCode+"/"+a.Date.String(), b.RoomTypeCode+"/"+b.RatePlanCode+"/"+b.Date.String())
	})
	return st, nil
}

// channexDays are the Channex names (mo … su) of the days of w, Monday first; nil
// (every day) for the zero set.
func channexDays(w models.Weekdays) []string {
	var out []string
	for _, name := range w.Names() {
		out = append(out, name[:2])
	}
	return out
}
