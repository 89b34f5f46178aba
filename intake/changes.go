package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/paritysync/paritysync/activities/store"
	"github.com/paritysync/paritysync/limiter"
	"github.com/paritysync/paritysync/models"
	"github.com/paritysync/paritysync/ops"
)

// Answers to one webhook change.
const (
	changeAccepted = "accepted" // in the channel's smoother; its outcome follows
	changeRejected = "rejected" // invalid: never sent; Problems say why
	changeRefused  = "refused"  // admission control: send it again after RetryAfter
)

// changeResult answers one change of a webhook post. A change without channel (or
// with "*") goes to every channel its property is on: Channels answers each apart
// (accepted, rejected or refused, whole per channel), under the id <id>@<channel>,
// and Status sums them up: accepted when every channel took it, refused when one
// refused it (send it again: the channels that took it already ignore the same
// version), else rejected.
type changeResult struct {
	Index   int    `json:"index"`
	Line    int    `json:"line"`
	ID      string `json:"id,omitempty"`
	Channel string `json:"channel,omitempty"`
	Status  string `json:"status"`
	// OutcomeURL is where an accepted change's outcome will be.
	OutcomeURL string              `json:"outcome_url,omitempty"`
	Problems   []models.RowProblem `json:"problems,omitempty"`
	RetryAfter int                 `json:"retry_after,omitempty"`
	// Channels answers a fanned-out change per channel, sorted by channel.
	Channels []changeResult `json:"channels,omitempty"`
}

// changesAnswer is the 202 answer to POST /v1/changes.
type changesAnswer struct {
	Accepted int            `json:"accepted"`
	Rejected int            `json:"rejected"`
	Refused  int            `json:"refused"`
	Changes  []changeResult `json:"changes"`
	// CallbackEventID is the event id of the post's callback (callback_url).
	CallbackEventID string `json:"callback_event_id,omitempty"`
}

// changeBatchPrefix starts the id of every batch a burst smoother flushes.
const changeBatchPrefix = "smoother-"

// smootherID is the id a change travels under in the smoothers: the tenant's,
// so tenants never read or overwrite each other's changes.
func smootherID(tenant, id string) string { return tenant + ":" + id }

// postChanges hands small changes to the channels' burst smoothers. Each change is
// answered: accepted, rejected (field and rule) or refused by admission control
// (the channel's smoother is full, or its daily quota cannot absorb the change).
// Any refusal makes the answer a 429 problem with Retry-After; the accepted ones in
// it are accepted all the same (sending them again is harmless: same version).
// A change without channel, or with "*", is fanned out to every channel its
// property is on (PUT /v1/properties/{id}/channels) and answered per channel.
func (s *Server) postChanges(w http.ResponseWriter, r *http.Request) {
	_, decoded, ok := s.readMutations(w, r, s.cfg.MaxChangeBody, s.cfg.MaxChanges)
	if !ok {
		return
	}
	tenant := tenantOf(r.Context())
	callback := r.URL.Query().Get("callback_url")
	if callback != "" {
		if rule := s.cfg.Callbacks.checkCallback(tenant, callback); rule != "" {
			writeProblem(w, r, http.StatusBadRequest, probBadRequest, "query parameter callback_url: "+rule+"; nothing was accepted",
				func(p *problem) { p.Field, p.Rule = "callback_url", rule })
			return
		}
	}
	decoded = claim(callerOf(r.Context()), decoded)
	// The rows meant for every mapped channel, by index.
	fanned := map[int]bool{}
	for i, m := range decoded.Mutations {
		if ops.EveryChannel(m) {
			fanned[decoded.Indexes[i]] = true
		}
	}
	decoded, err := ops.FanOut(r.Context(), s.st, decoded)
	if err != nil {
		s.internal(w, r, err)
		return
	}
	v, _, err := s.checker(r.Context(), decoded.Mutations)
	if err != nil {
		s.internal(w, r, err)
		return
	}
	results := make([]changeResult, decoded.Rows)
	for i := range results {
		results[i] = changeResult{Index: i, Status: changeAccepted}
	}
	for _, p := range decoded.Problems {
		res := &results[p.Index]
		res.Status, res.Line, res.Problems = changeRejected, p.Line, append(res.Problems, p)
		if p.ID != "" {
			res.ID = p.ID
		}
	}
	// One answer per change as it goes to one channel, parallel to decoded.Mutations.
	slots := make([]changeResult, len(decoded.Mutations))
	byChannel := map[string][]int{} // channel → indexes into decoded.Mutations
	for i, m := range decoded.Mutations {
		slot := &slots[i]
		*slot = changeResult{Index: decoded.Indexes[i], Line: decoded.Lines[i], ID: m.ID, Status: changeAccepted}
		if fanned[slot.Index] {
			slot.Channel = m.Channel
		}
		if ve := v.Validate(m); len(ve) > 0 {
			slot.Status = changeRejected
			id := m.ID
			if ve.Has("id", models.RuleIDStored) {
				id = "" // never echoed: it may be anything
			}
			for _, fe := range ve {
				slot.Problems = append(slot.Problems, models.RowProblem{Line: slot.Line, Index: slot.Index, ID: id, Field: fe.Field, Rule: fe.Rule})
			}
			continue
		}
		byChannel[m.Channel] = append(byChannel[m.Channel], i)
	}
	channels := make([]string, 0, len(byChannel))
	for ch := range byChannel {
		channels = append(channels, ch)
	}
	sort.Strings(channels)
	refuse := func(i int, after time.Duration, field, rule, detail string) {
		res := &slots[i]
		res.Status, res.RetryAfter = changeRefused, retrySeconds(after)
		res.Problems = []models.RowProblem{{Line: res.Line, Index: res.Index, ID: res.ID, Field: field, Rule: rule, Detail: detail}}
	}
	// Each channel's changes go to its submitter, all channels at once; each answers
	// the post's changes for it whole: taken, refused or busy.
	type handOff struct {
		ch     string
		take   []models.Mutation
		taken  []int
		answer submitAnswer
	}
	var handOffs []*handOff
	for _, ch := range channels {
		st, err := s.lim.Status(r.Context(), ch)
		if err != nil {
			s.internal(w, r, err)
			return
		}
		held, err := s.backedOff(r.Context(), ch, st.PausedFor, decoded.Mutations, byChannel[ch])
		if err != nil {
			s.internal(w, r, err)
			return
		}
		h := &handOff{ch: ch}
		for k, i := range byChannel[ch] {
			m := decoded.Mutations[i]
			m.ApplyDefaults(nil)
			// The quota tiers of the limiter: at the stop nothing goes until the reset;
			// at throttle, priority 4 and 5 wait for it.
			if st.Tier == limiter.TierStop || (st.Tier == limiter.TierThrottle && m.Priority >= 4) {
				refuse(i, st.QuotaResetsIn, "channel", ruleQuota,
					fmt.Sprintf("%s used %d of its %d daily requests (tier %s)", ch, st.DailyUsed, st.DailyLimit, st.Tier))
				continue
			}
			// A family the channel stopped with quota_exhausted takes nothing until
			// the stop ends; the channel's other families go on.
			if stop, ok := stoppedFamily(st, m); ok {
				refuse(i, stop.For, "channel", ruleQuota,
					fmt.Sprintf("%s stopped %s until %s: it answered quota_exhausted", ch, stop.Family,
						time.Now().UTC().Add(stop.For).Round(time.Second).Format(time.RFC3339)))
				continue
			}
			// A back-off after a 429 holds the change's property (on a channel that
			// limits per property) or the whole channel: nothing of it goes before
			// the back-off ends, so it is refused until then, as the limiter would.
			if b := held[k]; b.wait > 0 {
				what := ch
				if b.property != "" {
					what = fmt.Sprintf("%s's %s of %s", ch, b.window, b.property)
				}
				refuse(i, b.wait, "channel", ruleBackoff, fmt.Sprintf("%s backed off for %s: the channel asked to be called later",
					what, b.wait.Round(time.Millisecond)))
				continue
			}
			m.ID = smootherID(tenant, m.ID)
			h.take, h.taken = append(h.take, m), append(h.taken, i)
		}
		if len(h.take) > 0 {
			handOffs = append(handOffs, h)
		}
	}
	sctx, cancel := context.WithTimeout(r.Context(), s.cfg.SubmitTimeout)
	var wg sync.WaitGroup
	for _, h := range handOffs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			h.answer = s.submitterFor(h.ch).hand(sctx, h.take)
		}()
	}
	wg.Wait()
	cancel()
	var members []store.PostMember // the accepted changes a callback waits for
	for _, h := range handOffs {
		switch a := h.answer; a.verdict {
		case submitBusy:
			// The smoother did not answer in time (a loaded worker): the changes may
			// still land, so they are refused as "send again", which is harmless
			// (same id and version), never answered 500.
			for _, i := range h.taken {
				refuse(i, models.DefaultDebounce+s.cfg.SubmitTimeout, "channel", ruleSmootherBusy,
					fmt.Sprintf("%s's smoother did not answer within %s", h.ch, s.cfg.SubmitTimeout))
			}
		case submitFull:
			for _, i := range h.taken {
				refuse(i, a.after, "channel", ruleSmootherFull,
					fmt.Sprintf("%s's smoother holds %d of at most %d changes", h.ch, a.status.Pending, a.status.MaxPending))
			}
		case submitFailed:
			s.internal(w, r, a.err)
			return
		default:
			for k, i := range h.taken {
				slots[i].OutcomeURL = "/v1/changes/" + decoded.Mutations[i].ID
				members = append(members, store.PostMember{Channel: h.ch, MutationID: h.take[k].ID,
					Families: len(h.take[k].Families())})
			}
		}
	}
	for i := range slots {
		slot := slots[i]
		res := &results[slot.Index]
		if !fanned[slot.Index] {
			*res = slot
			continue
		}
		res.Line, res.Channels = slot.Line, append(res.Channels, slot)
		res.Problems = append(res.Problems, slot.Problems...)
	}
	retry := 0
	kind := probSmootherFull
	for i := range results {
		res := &results[i]
		if len(res.Channels) > 0 {
			sort.Slice(res.Channels, func(a, b int) bool { return res.Channels[a].Channel < res.Channels[b].Channel })
			res.ID = strings.TrimSuffix(res.Channels[0].ID, "@"+res.Channels[0].Channel)
			res.Status = changeAccepted
			for _, c := range res.Channels {
				switch {
				case c.Status == changeRefused:
					res.Status, res.RetryAfter = changeRefused, max(res.RetryAfter, c.RetryAfter)
				case c.Status == changeRejected && res.Status == changeAccepted:
					res.Status = changeRejected
				}
			}
		}
		if res.Status != changeRefused {
			continue
		}
		retry = max(retry, res.RetryAfter)
		for _, p := range res.Problems {
			switch p.Rule {
			case ruleQuota:
				kind = probQuota
			case ruleBackoff:
				if kind != probQuota {
					kind = probBackoff
				}
			}
		}
	}
	ans := changesAnswer{Changes: results}
	for _, res := range results {
		switch res.Status {
		case changeAccepted:
			ans.Accepted++
		case changeRejected:
			ans.Rejected++
		case changeRefused:
			ans.Refused++
		}
	}
	for i, slot := range slots {
		if slot.Status != changeRejected {
			s.metrics.changes.WithLabelValues(decoded.Mutations[i].Channel, slot.Status).Inc()
		}
	}
	if ans.Rejected > 0 {
		s.metrics.changes.WithLabelValues("", changeRejected).Add(float64(ans.Rejected))
	}
	if callback != "" {
		// One signed POST when every accepted change has its outcome (at once when
		// none was accepted: the answer is their outcome).
		ans.CallbackEventID = "chg_" + uuid.NewString()
		raw, err := json.Marshal(ans)
		if err == nil {
			err = s.st.RegisterPost(r.Context(), store.Post{EventID: ans.CallbackEventID, Tenant: tenant, URL: callback,
				Answer: raw, Members: members})
		}
		if err != nil {
			s.internal(w, r, err)
			return
		}
	}
	if ans.Refused > 0 {
		writeProblem(w, r, http.StatusTooManyRequests, kind,
			fmt.Sprintf("%d of %d changes refused by admission control (%d accepted, %d rejected); send the refused ones again after %d s",
				ans.Refused, len(results), ans.Accepted, ans.Rejected, retry),
			func(p *problem) { p.RetryAfter, p.Changes, p.CallbackEventID = retry, results, ans.CallbackEventID })
		return
	}
	writeJSON(w, http.StatusAccepted, ans)
}

// stoppedFamily is the stop of one of m's families on the channel st describes.
func stoppedFamily(st limiter.Status, m models.Mutation) (limiter.FamilyStop, bool) {
	for _, stop := range st.Stopped {
		if slices.Contains(m.Families(), stop.Family) {
			return stop, true
		}
	}
	return limiter.FamilyStop{}, false
}

// Admission rules of a refused change.
const (
	ruleSmootherFull = "must wait until the channel's smoother has room"
	ruleSmootherBusy = "must wait until the channel's smoother answers"
	ruleQuota        = "must wait until the channel's daily quota resets"
	ruleBackoff      = "must wait until the channel's back-off ends"
)

// heldBy is the back-off holding one change: the longest of those holding its
// families, with the property window it is on (none for the channel's own).
type heldBy struct {
	wait             time.Duration
	property, window string
}

// backedOff asks the limiter, in one round trip, what back-off holds each of the
// changes idx of ms on channel ch (the channel's, whose end is channelFor away, or
// on a per-property channel its property's window of each family), one answer per
// index.
func (s *Server) backedOff(ctx context.Context, ch string, channelFor time.Duration, ms []models.Mutation, idx []int) ([]heldBy, error) {
	cfg := s.channels[ch]
	var scopes []limiter.Scope
	for _, i := range idx {
		for _, f := range ms[i].Families() {
			scopes = append(scopes, limiter.Scope{Property: ms[i].PropertyID, Family: f})
		}
	}
	left, err := s.lim.BackoffsOf(ctx, ch, scopes)
	if err != nil {
		return nil, err
	}
	out := make([]heldBy, len(idx))
	n := 0
	for k, i := range idx {
		for _, f := range ms[i].Families() {
			if w := left[n]; w > out[k].wait {
				out[k] = heldBy{wait: w}
				if cfg.Scope == models.ScopeProperty && w > channelFor {
					out[k].property, out[k].window = ms[i].PropertyID, cfg.WindowOf(f)
				}
			}
			n++
		}
	}
	return out, nil
}

// getChange answers an accepted change's outcomes, per endpoint family; an empty
// list while it is on its way.
func (s *Server) getChange(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if !models.ValidMutationID(id) {
		// No change is ever accepted under such an id; it never reaches the store.
		writeProblem(w, r, http.StatusNotFound, probNotFound, "no such change: a change id is 1-128 characters of [A-Za-z0-9._:@~-]")
		return
	}
	list, err := s.st.OutcomesByMutation(r.Context(), changeBatchPrefix, smootherID(tenantOf(r.Context()), id))
	if err != nil {
		s.internal(w, r, err)
		return
	}
	if list == nil {
		list = []store.MutationOutcome{}
	}
	for i := range list {
		list[i].MutationID = id
	}
	writeJSON(w, http.StatusOK, outcomeList{Outcomes: list})
}
