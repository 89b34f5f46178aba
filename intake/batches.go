package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/paritysync/paritysync/activities/store"
	"github.com/paritysync/paritysync/models"
	"github.com/paritysync/paritysync/ops"
)

// batchAccepted is the 202 answer to POST /v1/batches.
type batchAccepted struct {
	BatchID    string `json:"batch_id"`
	WorkflowID string `json:"workflow_id"`
	// Attached: the same Idempotency-Key and body named this batch before; nothing
	// new was started.
	Attached  bool   `json:"attached"`
	State     string `json:"state,omitempty"`
	Mutations int    `json:"mutations"`
	Accepted  int    `json:"accepted"`
	// Rejected lists every refused row with each field and rule; each also has a
	// recorded rejected outcome (GET …/rejections).
	Rejected  []models.RowProblem `json:"rejected"`
	StatusURL string              `json:"status_url"`
	UI        string              `json:"ui"`
}

// unknownChannel stands for the channel of a row that could not be read far enough
// to name one.
const unknownChannel = "unknown"

// postBatch starts a batch: the rows that are valid are started, every refused row
// is recorded as rejected and listed in the answer. An unreadable body starts and
// stores nothing.
func (s *Server) postBatch(w http.ResponseWriter, r *http.Request) {
	body, decoded, ok := s.readMutations(w, r, s.cfg.MaxBatchBody, s.cfg.MaxBatchRows)
	if !ok {
		return
	}
	all := decoded
	decoded = claim(callerOf(r.Context()), decoded)
	// Channel "*": one mutation per channel the property is on, each with its own id.
	decoded, err := ops.FanOut(r.Context(), s.st, decoded)
	if err != nil {
		s.internal(w, r, err)
		return
	}
	dryRun, ok := boolParam(w, r, "dry_run")
	if !ok {
		return
	}
	v, chs, err := s.checker(r.Context(), decoded.Mutations)
	if err != nil {
		s.internal(w, r, err)
		return
	}
	if dryRun {
		// Validated and coalesced as the real run would; nothing is started or stored.
		writeJSON(w, http.StatusOK, ops.DryRun(decoded, v, chs, s.cfg.Settings.MaxInFlight,
			tenantOf(r.Context())+".dry-run"))
		return
	}
	callback := r.URL.Query().Get("callback_url")
	if callback != "" {
		if rule := s.cfg.Callbacks.checkCallback(tenantOf(r.Context()), callback); rule != "" {
			writeProblem(w, r, http.StatusBadRequest, probBadRequest, "query parameter callback_url: "+rule+"; nothing was started",
				func(p *problem) { p.Field, p.Rule = "callback_url", rule })
			return
		}
	}
	valid, problems := v.Check(decoded)
	if len(valid) == 0 {
		writeProblem(w, r, http.StatusUnprocessableEntity, probInvalid,
			fmt.Sprintf("all %d rows were refused; nothing was started", decoded.Rows), func(p *problem) { p.Problems = problems })
		return
	}
	keys := r.Header.Values("Idempotency-Key")
	key := ""
	if len(keys) > 0 {
		key = strings.TrimSpace(keys[0])
	}
	if len(keys) > 1 || len(keys) == 1 && !idempotencyKeyPattern.MatchString(key) {
		writeProblem(w, r, http.StatusBadRequest, probBadRequest, "Idempotency-Key: "+ruleIdempotencyKey+", given once; nothing was started",
			func(p *problem) { p.Field, p.Rule = "Idempotency-Key", ruleIdempotencyKey })
		return
	}
	id := batchID(tenantOf(r.Context()), key, s.now(), uuid.NewString()[:8])
	setLogBatch(r, id)
	// The callback is part of what the key names: the same body with another
	// callback_url is other content.
	content := body
	if callback != "" {
		content = append(append(slices.Clip(body), "\x00callback_url="...), callback...)
	}
	sum := sha256.Sum256(content)
	b, err := ops.StartBatch(r.Context(), s.tc, s.cfg.Settings.TaskQueue, s.st,
		ops.Batch{ID: id, Mutations: valid, Digest: hex.EncodeToString(sum[:]), CallbackURL: callback})
	var conflict *ops.ConflictError
	switch {
	case errors.As(err, &conflict) && conflict.SameContent:
		// The same key and body, already finished: the same batch.
		b = ops.Started{BatchID: id, WorkflowID: models.BatchWorkflowID(id), Attached: true}
	case errors.As(err, &conflict):
		writeProblem(w, r, http.StatusUnprocessableEntity, probConflict,
			"Idempotency-Key "+key+" named batch "+id+" with another body; use a new key for new content",
			func(p *problem) { p.BatchID = id })
		return
	case err != nil:
		s.internal(w, r, err)
		return
	}
	if !b.Attached {
		// Listed from now on; PrepareBatch would make the row a moment later anyway.
		if err := s.st.RegisterBatch(r.Context(), id); err != nil {
			s.log.Warn("register batch", "batch", id, "error", err)
		}
	}
	// Recorded after the start, so a refused key stores nothing; an attach records
	// them again, which keeps the first record.
	if err := s.recordRejections(r, id, all, decoded, problems); err != nil {
		s.internal(w, r, err)
		return
	}
	if problems == nil {
		problems = []models.RowProblem{}
	}
	state := ops.StateRunning
	if b.Attached && b.Run == nil {
		state = conflict.State
	}
	writeJSON(w, http.StatusAccepted, batchAccepted{BatchID: id, WorkflowID: b.WorkflowID, Attached: b.Attached,
		State: state, Mutations: decoded.Rows, Accepted: len(valid), Rejected: problems,
		StatusURL: "/v1/batches/" + id, UI: s.uiLink(b.WorkflowID)})
}

// batchList is GET /v1/batches.
type batchList struct {
	Batches []batchListItem `json:"batches"`
	// Next is the URL of the next page; absent after the last.
	Next string `json:"next,omitempty"`
}

// batchListItem is one batch of a listing.
type batchListItem struct {
	store.BatchSummary
	StatusURL string `json:"status_url"`
}

// listStates are the states a listing filters by.
var listStates = []string{ops.StateRunning, ops.StateDone, ops.StateCancelled, ops.StateTerminated, ops.StateFailed,
	ops.StateTimedOut, store.StateUnknown}

// listBatches lists the caller's batches (an operator's: every tenant's), newest
// first, a page at a time, from the store.
func (s *Server) listBatches(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	bad := func(field, rule string) {
		writeProblem(w, r, http.StatusBadRequest, probBadRequest, "query parameter "+field+": "+rule,
			func(p *problem) { p.Field, p.Rule = field, rule })
	}
	caller := callerOf(r.Context())
	f := store.BatchFilter{Tenant: caller.tenant, AllTenants: caller.admin, State: q.Get("state"),
		Channel: q.Get("channel"), Cursor: q.Get("cursor"), Limit: 100}
	if f.State != "" && !slices.Contains(listStates, f.State) {
		bad("state", "must be one of "+strings.Join(listStates, ", "))
		return
	}
	if v := q.Get("since"); v != "" {
		t, err := time.Parse(time.RFC3339, v)
		if err != nil {
			bad("since", "must be an RFC 3339 time (2027-03-01T00:00:00Z)")
			return
		}
		f.Since = t
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 500 {
			bad("limit", "must be 1..500")
			return
		}
		f.Limit = n
	}
	page, next, err := s.st.ListBatches(r.Context(), f)
	if errors.Is(err, store.ErrBadCursor) {
		bad("cursor", "must be a cursor a page of this listing gave")
		return
	}
	if err != nil {
		s.internal(w, r, err)
		return
	}
	out := batchList{Batches: make([]batchListItem, len(page))}
	for i, b := range page {
		out.Batches[i] = batchListItem{BatchSummary: b, StatusURL: "/v1/batches/" + b.BatchID}
	}
	if next != "" {
		q.Set("cursor", next)
		out.Next = "/v1/batches?" + q.Encode()
	}
	writeJSON(w, http.StatusOK, out)
}

// boolParam reads the query parameter name: true, false or absent (false);
// anything else is answered 400 and ok is false.
func boolParam(w http.ResponseWriter, r *http.Request, name string) (v, ok bool) {
	switch r.URL.Query().Get(name) {
	case "", "false":
		return false, true
	case "true":
		return true, true
	}
	writeProblem(w, r, http.StatusBadRequest, probBadRequest, "query parameter "+name+": must be true or false",
		func(p *problem) { p.Field, p.Rule = name, "must be true or false" })
	return false, false
}

// recordRejections records a rejected outcome for every refused row, with all its
// problems as the reason; a row fanned out to several channels ("*") has one per
// channel it was refused on. A row without a readable id is named line-N. The
// channel is the fanned row's, else the one the body named (all, before the
// tenant's rows were claimed).
func (s *Server) recordRejections(r *http.Request, batchID string, all, fanned models.Decoded, problems []models.RowProblem) error {
	if len(problems) == 0 {
		return nil
	}
	type row struct {
		index int
		id    string
	}
	channelOf := map[int]string{}
	for i, m := range all.Mutations {
		channelOf[all.Indexes[i]] = m.Channel
	}
	fannedOf := map[row]string{}
	for i, m := range fanned.Mutations {
		fannedOf[row{fanned.Indexes[i], m.ID}] = m.Channel
	}
	var out []store.MutationOutcome
	byRow := map[row]int{}
	for _, p := range problems {
		reason := p.Field + ": " + p.Rule
		k := row{p.Index, p.ID}
		if i, ok := byRow[k]; ok {
			out[i].Reason += "; " + reason
			continue
		}
		id := p.ID
		if id == "" {
			id = fmt.Sprintf("line-%d", p.Line)
		}
		ch, ok := fannedOf[k]
		if !ok {
			ch = channelOf[p.Index]
		}
		if _, known := s.channels[ch]; !known {
			ch = unknownChannel
		}
		byRow[k] = len(out)
		out = append(out, store.MutationOutcome{MutationID: id, Channel: ch, Outcome: models.OutcomeRejected, Reason: reason})
	}
	_, err := s.st.RecordOutcomes(r.Context(), batchID, out)
	return err
}

// batchView is GET /v1/batches/{id}, read from the store with one describe of the
// batch (no workflow query).
type batchView struct {
	BatchID    string `json:"batch_id"`
	WorkflowID string `json:"workflow_id"`
	State      string `json:"state"`
	// Planned says whether the batch's totals are recorded: before, each channel's
	// total is only its outcomes recorded.
	Planned bool `json:"planned"`
	// Counts are per channel: total the updates planned, the others the outcomes
	// recorded so far.
	Counts []models.ChannelCounts `json:"counts"`
	Totals models.ChannelCounts   `json:"totals"`
	// Progress is done of total per channel at the average rate since the batch
	// started, with the time left at it.
	Progress []ops.ChannelProgress `json:"progress"`
	// Result is the batch's own result once done (with requests and waits per
	// channel); absent before.
	Result *models.BatchStatus `json:"result,omitempty"`
	UI     string              `json:"ui"`
}

func (s *Server) getBatch(w http.ResponseWriter, r *http.Request) {
	id, ok := ownBatch(w, r)
	if !ok {
		return
	}
	rep, err := ops.BatchState(r.Context(), s.tc, s.st, id)
	if s.batchFailed(w, r, id, err) {
		return
	}
	p := rep.ProgressAt(rep.Counts, s.now())
	writeJSON(w, http.StatusOK, batchView{BatchID: id, WorkflowID: rep.WorkflowID, State: rep.State, Planned: rep.Planned,
		Counts: p.Channels, Totals: p.Totals, Progress: p.Progress, Result: rep.Final, UI: s.uiLink(rep.WorkflowID)})
}

func (s *Server) deleteBatch(w http.ResponseWriter, r *http.Request) {
	id, ok := ownBatch(w, r)
	if !ok {
		return
	}
	c, err := ops.RequestCancel(r.Context(), s.tc, s.st, id)
	if s.batchFailed(w, r, id, err) {
		return
	}
	if c.Was == ops.StateRunning {
		// A big batch takes longer to close its outcomes than a request may last:
		// past CancelWait the answer is 202 and the PMS follows the status URL.
		wctx, cancel := context.WithTimeout(r.Context(), s.cfg.CancelWait)
		err := ops.AwaitCancelled(wctx, s.tc, id)
		cancel()
		if errors.Is(err, context.DeadlineExceeded) && r.Context().Err() == nil {
			writeJSON(w, http.StatusAccepted, map[string]any{"batch_id": id, "was": c.Was, "state": "cancelling",
				"status_url": "/v1/batches/" + id})
			return
		}
		if err != nil {
			s.internal(w, r, err)
			return
		}
	}
	counts, err := s.st.BatchCounts(r.Context(), id)
	if err != nil {
		s.internal(w, r, err)
		return
	}
	if counts == nil {
		counts = []models.ChannelCounts{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"batch_id": id, "was": c.Was, "closed": c.Closed, "counts": counts})
}

// outcomeList is a list of outcomes.
type outcomeList struct {
	BatchID  string                  `json:"batch_id,omitempty"`
	Outcomes []store.MutationOutcome `json:"outcomes"`
}

func (s *Server) getRejections(w http.ResponseWriter, r *http.Request) {
	id, ok := ownBatch(w, r)
	if !ok {
		return
	}
	list, err := ops.Rejections(r.Context(), s.st, id)
	if err != nil {
		s.internal(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, outcomeList{BatchID: id, Outcomes: list})
}

func (s *Server) getOutcomes(w http.ResponseWriter, r *http.Request) {
	id, ok := ownBatch(w, r)
	if !ok {
		return
	}
	m := r.URL.Query().Get("mutation")
	if !models.ValidMutationID(m) {
		writeProblem(w, r, http.StatusBadRequest, probBadRequest, "query parameter mutation: "+models.RuleIDFormat,
			func(p *problem) { p.Field, p.Rule = "mutation", models.RuleIDFormat })
		return
	}
	list, err := ops.MutationOutcomes(r.Context(), s.st, id, m)
	if err != nil {
		s.internal(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, outcomeList{BatchID: id, Outcomes: list})
}

// batchFailed answers err of an operation on batch id, if any: 404 for a batch
// Temporal does not know, else 500. It reports whether it answered.
func (s *Server) batchFailed(w http.ResponseWriter, r *http.Request, id string, err error) bool {
	switch {
	case err == nil:
		return false
	case errors.Is(err, ops.ErrNoBatch):
		writeProblem(w, r, http.StatusNotFound, probNotFound, "no batch "+id)
	default:
		s.internal(w, r, err)
	}
	return true
}

// internal answers 500 and logs the error; the PMS sees no internals.
func (s *Server) internal(w http.ResponseWriter, r *http.Request, err error) {
	s.log.Error("request failed", "method", r.Method, "path", r.URL.Path, "error", err)
	writeProblem(w, r, http.StatusInternalServerError, probInternal, "the request failed; it is logged")
}

// readMutations reads a body of mutations of at most maxBody bytes and maxRows
// rows; a body too big, too slow or unreadable is answered (a 400 problem naming
// its line and rule for one that does not decode), and ok is false.
func (s *Server) readMutations(w http.ResponseWriter, r *http.Request, maxBody int64, maxRows int) ([]byte, models.Decoded, bool) {
	body, ok := s.readBody(w, r, maxBody)
	if !ok {
		return nil, models.Decoded{}, false
	}
	decoded, err := models.DecodeMutations(body, models.DecodeLimits{MaxMutations: maxRows})
	var be *models.BodyError
	if errors.As(err, &be) {
		writeProblem(w, r, http.StatusBadRequest, probUnreadable, be.Error(), func(p *problem) {
			p.Line, p.Rule = be.Line, be.Rule
		})
		return body, decoded, false
	}
	if err != nil {
		writeProblem(w, r, http.StatusBadRequest, probUnreadable, err.Error())
		return body, decoded, false
	}
	return body, decoded, true
}
