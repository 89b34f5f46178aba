package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/paritysync/paritysync/activities/store"
	"github.com/paritysync/paritysync/models"
	"github.com/paritysync/paritysync/ops"
)

// channelOf is the path's channel when it is configured; otherwise it answers 404.
func (s *Server) channelOf(w http.ResponseWriter, r *http.Request) (string, bool) {
	ch := r.PathValue("channel")
	if _, ok := s.channels[ch]; !ok {
		writeProblem(w, r, http.StatusNotFound, probNotFound, "no channel "+ch)
		return "", false
	}
	return ch, true
}

// decodeStrict decodes a JSON body into v, refusing a field v does not have.
func decodeStrict(body []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}

func (s *Server) pauseChannel(w http.ResponseWriter, r *http.Request) {
	ch, ok := s.channelOf(w, r)
	if !ok {
		return
	}
	var in struct {
		Reason string `json:"reason"`
	}
	body, ok := s.readBody(w, r, 64<<10)
	if !ok {
		return
	}
	if err := decodeStrict(body, &in); err != nil || strings.TrimSpace(in.Reason) == "" {
		writeProblem(w, r, http.StatusBadRequest, probBadRequest, `want {"reason": "why the channel is paused"}`,
			func(p *problem) {
				p.Problems = []models.RowProblem{{Line: 1, Field: "reason", Rule: models.RuleRequired}}
			})
		return
	}
	s.setPause(w, r, ch, true, "tenant "+tenantOf(r.Context())+": "+in.Reason)
}

func (s *Server) resumeChannel(w http.ResponseWriter, r *http.Request) {
	if ch, ok := s.channelOf(w, r); ok {
		s.setPause(w, r, ch, false, "")
	}
}

func (s *Server) setPause(w http.ResponseWriter, r *http.Request, ch string, pause bool, reason string) {
	n, err := ops.SetPause(r.Context(), s.tc, s.lim, ch, pause, reason, func(id string, err error) {
		s.log.Warn("signal batch", "workflow", id, "error", err)
	})
	if err != nil {
		s.internal(w, r, err)
		return
	}
	action := map[bool]string{true: "pause", false: "resume"}[pause]
	writeJSON(w, http.StatusOK, map[string]any{"channel": ch, "action": action, "reason": reason, "signalled_batches": n})
}

func (s *Server) getQuota(w http.ResponseWriter, r *http.Request) {
	var slugs []string
	if ch := r.URL.Query().Get("channel"); ch != "" {
		if _, ok := s.channels[ch]; !ok {
			writeProblem(w, r, http.StatusNotFound, probNotFound, "no channel "+ch)
			return
		}
		slugs = []string{ch}
	} else {
		for _, c := range s.cfg.Channels {
			slugs = append(slugs, c.Slug)
		}
	}
	rows, err := ops.Quota(r.Context(), s.lim, slugs)
	if err != nil {
		s.internal(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"channels": rows, "worst_tier": ops.WorstTier(rows)})
}

// deadLetterView is one dead letter without its wire request.
type deadLetterView struct {
	ID          int64         `json:"id"`
	BatchID     string        `json:"batch_id"`
	Channel     string        `json:"channel"`
	PropertyID  string        `json:"property_id"`
	Family      models.Family `json:"family"`
	Reason      string        `json:"reason"`
	Status      int           `json:"status,omitempty"`
	Message     string        `json:"message,omitempty"`
	MutationIDs []string      `json:"mutation_ids"`
	StayDates   []models.Date `json:"stay_dates"`
	ParkedAt    string        `json:"parked_at"`
}

func viewDeadLetter(d store.DeadLetter) deadLetterView {
	return deadLetterView{ID: d.ID, BatchID: d.BatchID, Channel: d.Channel, PropertyID: d.PropertyID, Family: d.Family,
		Reason: d.Reason, Status: d.Status, Message: d.Message, MutationIDs: d.MutationIDs, StayDates: d.StayDates,
		ParkedAt: d.ParkedAt.UTC().Format("2006-01-02T15:04:05.000Z07:00")}
}

// getDLQ lists open dead letters, oldest first, a page at a time (after=<last id>).
func (s *Server) getDLQ(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	f := store.DeadLetterFilter{Channel: q.Get("channel"), Reason: q.Get("reason"), BatchID: q.Get("batch"), Limit: 100}
	for name, dst := range map[string]*int64{"after": &f.AfterID} {
		if v := q.Get(name); v != "" {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < 0 {
				writeProblem(w, r, http.StatusBadRequest, probBadRequest, "query parameter "+name+": must be a non-negative integer")
				return
			}
			*dst = n
		}
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 1000 {
			writeProblem(w, r, http.StatusBadRequest, probBadRequest, "query parameter limit: must be 1..1000")
			return
		}
		f.Limit = n
	}
	entries, err := s.st.DeadLetters(r.Context(), f)
	if err != nil {
		s.internal(w, r, err)
		return
	}
	out := make([]deadLetterView, len(entries))
	for i, e := range entries {
		out[i] = viewDeadLetter(e)
	}
	writeJSON(w, http.StatusOK, map[string]any{"dead_letters": out})
}

// replayDLQ re-sends the chosen open dead letters as one new batch.
func (s *Server) replayDLQ(w http.ResponseWriter, r *http.Request) {
	sel, _, ok := s.readDLQSelection(w, r, false)
	if !ok {
		return
	}
	entries, err := ops.SelectDeadLetters(r.Context(), s.st, sel)
	if s.dlqFailed(w, r, err) {
		return
	}
	rep, err := ops.ReplayDeadLetters(r.Context(), s.tc, s.cfg.Settings.TaskQueue, s.st, tenantOf(r.Context())+".", entries)
	if err != nil {
		s.internal(w, r, err)
		return
	}
	out := map[string]any{"entries": rep.Entries, "updates": rep.Updates, "acknowledged": rep.Acked}
	if rep.Entries > 0 {
		setLogBatch(r, rep.BatchID)
		out["batch_id"], out["workflow_id"], out["ui"] = rep.BatchID, rep.WorkflowID, s.uiLink(rep.WorkflowID)
		out["status_url"] = "/v1/batches/" + rep.BatchID
	}
	writeJSON(w, http.StatusAccepted, out)
}

// exportDLQ writes the selected dead letters (every open one by default) as JSON
// lines, with their requests, a page at a time: the same lines as starter dlq
// export.
func (s *Server) exportDLQ(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	acked, ok := boolParam(w, r, "acked")
	if !ok {
		return
	}
	sel := ops.DeadLetterSelection{Channel: q.Get("channel"), Reason: q.Get("reason"), BatchID: q.Get("batch"), Acked: acked}
	w.Header().Set("Content-Type", "application/x-ndjson")
	enc := json.NewEncoder(w)
	rc := http.NewResponseController(w)
	n := 0
	err := ops.EachDeadLetter(r.Context(), s.st, sel, func(d store.DeadLetter) error {
		n++
		if err := enc.Encode(d); err != nil {
			return err
		}
		if n%ops.ExportFlushEvery == 0 {
			_ = rc.Flush()
		}
		return nil
	})
	if err != nil && n == 0 {
		w.Header().Del("Content-Type")
		s.internal(w, r, err)
		return
	}
	if err != nil {
		// The status line is sent: the cut shows as a last line that is not JSON.
		s.log.Error("dead-letter export cut", "entries", n, "error", err)
		_, _ = w.Write([]byte("export failed after " + strconv.Itoa(n) + " entries\n"))
	}
}

// readDLQSelection reads the body of a dead-letter replay or ack: ids, or any of
// channel, reason and batch, and (withNote) an optional note. It answers 400 for an
// unreadable body, an unknown field or an empty selection.
func (s *Server) readDLQSelection(w http.ResponseWriter, r *http.Request, withNote bool) (ops.DeadLetterSelection, string, bool) {
	body, ok := s.readBody(w, r, 1<<20)
	if !ok {
		return ops.DeadLetterSelection{}, "", false
	}
	var in struct {
		IDs     []int64 `json:"ids"`
		Channel string  `json:"channel"`
		Reason  string  `json:"reason"`
		Batch   string  `json:"batch"`
		Note    *string `json:"note"`
	}
	err := decodeStrict(body, &in)
	sel := ops.DeadLetterSelection{IDs: in.IDs, Channel: in.Channel, Reason: in.Reason, BatchID: in.Batch}
	if err != nil || sel.Empty() || (in.Note != nil && !withNote) {
		want := `want a selection: {"ids": [1, 2]} or any of {"channel", "reason", "batch"}`
		if withNote {
			want += `, and an optional "note"`
		}
		writeProblem(w, r, http.StatusBadRequest, probBadRequest, want,
			func(p *problem) { p.Field, p.Rule = "ids", "a selection is required" })
		return ops.DeadLetterSelection{}, "", false
	}
	if in.Note == nil {
		return sel, "", true
	}
	return sel, *in.Note, true
}

// ackDLQ acknowledges the selected open dead letters, so they leave the open list.
func (s *Server) ackDLQ(w http.ResponseWriter, r *http.Request) {
	sel, note, ok := s.readDLQSelection(w, r, true)
	if !ok {
		return
	}
	note = strings.TrimSpace(note)
	if note == "" {
		note = "acknowledged over the API"
	}
	a, err := ops.AckDeadLetters(r.Context(), s.st, sel, "tenant "+tenantOf(r.Context())+": "+note)
	if s.dlqFailed(w, r, err) {
		return
	}
	writeJSON(w, http.StatusOK, a)
}

// dlqFailed answers err of an operation on selected dead letters, if any: 404
// for a dead letter id no entry has, else 500. It reports whether it answered.
func (s *Server) dlqFailed(w http.ResponseWriter, r *http.Request, err error) bool {
	switch {
	case err == nil:
		return false
	case errors.Is(err, store.ErrDeadLetterNotFound):
		writeProblem(w, r, http.StatusNotFound, probNotFound, err.Error())
	default:
		s.internal(w, r, err)
	}
	return true
}

// propertyChannels is GET and PUT /v1/properties/{id}/channels.
type propertyChannels struct {
	PropertyID string   `json:"property_id"`
	Channels   []string `json:"channels"`
	// Codes are the property's codes by channel: Channex ids (without them the
	// worker's YAML, channex.properties), or an OpenTravel channel's codes (without
	// them paritysync's own).
	Codes map[string]any `json:"codes,omitempty"`
}

// Rules of a property's codes, as a 400 names them.
const (
	ruleCodesListed   = "must be a channel of channels"
	ruleCodesProtocol = "codes are for a channel of protocol channex or opentravel (paritysync's own protocol takes paritysync's codes)"
	ruleCodesObject   = "must be the channel's codes object (ChannexCodes or OpenTravelCodes), without other fields"
)

// propertyOf is the path's property id when it matches the property pattern;
// otherwise it answers 404.
func (s *Server) propertyOf(w http.ResponseWriter, r *http.Request) (string, bool) {
	id := r.PathValue("id")
	if !s.validator.PropertyPattern.MatchString(id) {
		writeProblem(w, r, http.StatusNotFound, probNotFound, "no property "+strconv.Quote(id)+": a property id matches "+
			s.validator.PropertyPattern.String())
		return "", false
	}
	return id, true
}

func (s *Server) getPropertyChannels(w http.ResponseWriter, r *http.Request) {
	id, ok := s.propertyOf(w, r)
	if !ok {
		return
	}
	list, err := s.st.PropertyMappings(r.Context(), id)
	if err != nil {
		s.internal(w, r, err)
		return
	}
	out := propertyChannels{PropertyID: id, Channels: []string{}}
	for _, pc := range list {
		out.Channels = append(out.Channels, pc.Channel)
		var codes any
		switch {
		case pc.Channex != nil:
			codes = pc.Channex
		case pc.OpenTravel != nil:
			codes = pc.OpenTravel
		default:
			continue
		}
		if out.Codes == nil {
			out.Codes = map[string]any{}
		}
		out.Codes[pc.Channel] = codes
	}
	writeJSON(w, http.StatusOK, out)
}

// putPropertyChannels replaces the channels a property is on; a mutation for
// channel "*" goes to each from the next request on.
func (s *Server) putPropertyChannels(w http.ResponseWriter, r *http.Request) {
	id, ok := s.propertyOf(w, r)
	if !ok {
		return
	}
	body, ok := s.readBody(w, r, 64<<10)
	if !ok {
		return
	}
	var in struct {
		Channels []string                   `json:"channels"`
		Codes    map[string]json.RawMessage `json:"codes"`
	}
	if err := decodeStrict(body, &in); err != nil || in.Channels == nil {
		writeProblem(w, r, http.StatusBadRequest, probBadRequest,
			`want {"channels": ["expedia", …], "codes": {"<channex channel>": {…}}} (an empty list unmaps the property)`,
			func(p *problem) { p.Field, p.Rule = "channels", models.RuleRequired })
		return
	}
	seen := map[string]bool{}
	for i, ch := range in.Channels {
		if _, known := s.channels[ch]; !known || seen[ch] {
			rule := models.RuleChannelUnknown
			if seen[ch] {
				rule = "must be listed once"
			}
			field := "channels[" + strconv.Itoa(i) + "]"
			writeProblem(w, r, http.StatusBadRequest, probBadRequest, field+" "+strconv.Quote(ch)+": "+rule,
				func(p *problem) { p.Field, p.Rule = field, rule })
			return
		}
		seen[ch] = true
	}
	list := make([]store.PropertyChannel, len(in.Channels))
	for i, ch := range in.Channels {
		list[i] = store.PropertyChannel{Channel: ch}
	}
	for _, ch := range slices.Sorted(maps.Keys(in.Codes)) {
		field, rule := "codes."+ch, ""
		i := slices.Index(in.Channels, ch)
		switch proto := s.channels[ch].Protocol; {
		case i < 0:
			rule = ruleCodesListed
		case proto == models.ProtocolChannex:
			list[i].Channex, field, rule = decodeCodes[models.ChannexProperty](in.Codes[ch], field)
		case proto == models.ProtocolOpenTravel:
			list[i].OpenTravel, field, rule = decodeCodes[models.OpenTravelProperty](in.Codes[ch], field)
		default:
			rule = ruleCodesProtocol
		}
		if rule != "" {
			writeProblem(w, r, http.StatusBadRequest, probBadRequest, field+": "+rule+"; nothing was changed",
				func(p *problem) { p.Field, p.Rule = field, rule })
			return
		}
	}
	if err := s.st.SetPropertyMappings(r.Context(), id, list); err != nil {
		s.internal(w, r, err)
		return
	}
	if s.mappings != nil {
		s.mappings.Invalidate() // a remapped property's new codes count from the next request here
	}
	s.getPropertyChannels(w, r)
}

// decodeCodes decodes raw, the codes a PUT gives a channel at field, strictly into
// a T (a protocol's property codes); what is wrong with them is the field it is at
// and its rule, rule "" when nothing is.
func decodeCodes[T interface{ Problem() (field, rule string) }](raw json.RawMessage, field string) (codes *T, at, rule string) {
	codes = new(T)
	if decodeStrict(raw, codes) != nil {
		return codes, field, ruleCodesObject
	}
	if f, r := (*codes).Problem(); f != "" {
		return codes, field + "." + f, r
	}
	return codes, field, ""
}
