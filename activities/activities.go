package activities

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"

	"github.com/paritysync/paritysync/activities/store"
	"github.com/paritysync/paritysync/channels"
	"github.com/paritysync/paritysync/config"
	"github.com/paritysync/paritysync/limiter"
	"github.com/paritysync/paritysync/models"
)

// Error types of the typed, non-retryable errors PushRequest returns. The workflow
// tells them apart by type and waits or dead-letters; Temporal never retries them.
const (
	ErrRateLimited    = "RateLimited"    // the limiter said wait (held slot, pause, back-off): wait, then ask again
	ErrThrottled      = "Throttled"      // the channel answered 429/503 with or without Retry-After
	ErrTransient      = "Transient"      // 5xx, timeout, network: back off, bounded attempts
	ErrAuthExpired    = "AuthExpired"    // 401: refresh the credential once
	ErrQuotaExhausted = "QuotaExhausted" // daily budget spent: wait for the reset (Failure.Wait), then go again
	ErrRejected       = "Rejected"       // other 4xx: dead-letter now
	// ErrPayloadLost means a batch's stored payload or request is gone (released or
	// past its retention): retrying cannot bring it back. The updates are parked
	// where they are known, and reconciliation re-sends the desired state.
	ErrPayloadLost = "PayloadLost"
)

// NonRetryableErrors lists the typed errors for activity RetryPolicies.
var NonRetryableErrors = []string{ErrRateLimited, ErrThrottled, ErrTransient, ErrAuthExpired, ErrQuotaExhausted,
	ErrRejected, ErrPayloadLost}

// payloadError turns a store.ErrBatchNotFound into the typed ErrPayloadLost and
// passes any other error through (Temporal retries it within its bound).
func payloadError(err error) error {
	if errors.Is(err, store.ErrBatchNotFound) {
		return FailureError(ErrPayloadLost, Failure{Message: err.Error()})
	}
	return err
}

// Failure is the detail every typed PushRequest error carries.
type Failure struct {
	// Wait is how long to wait before trying again (rate limited, throttled).
	Wait time.Duration `json:"wait"`
	// ServerWait is true when the channel said how long (Retry-After).
	ServerWait bool   `json:"server_wait"`
	Status     int    `json:"status,omitempty"`
	Message    string `json:"message,omitempty"`
	Tier       string `json:"tier,omitempty"`
	// Paused is the operator's reason when the channel is paused.
	Paused string `json:"paused,omitempty"`
	// Held is true when the wait is for a slot the limiter holds for the request.
	Held bool `json:"held,omitempty"`
}

// FailureError is the typed, non-retryable error of kind errType carrying f.
func FailureError(errType string, f Failure) error {
	msg := errType
	if f.Status != 0 {
		msg = fmt.Sprintf("%s: status %d", errType, f.Status)
	}
	if f.Message != "" {
		msg += ": " + f.Message
	}
	opts := temporal.ApplicationErrorOptions{NonRetryable: true, Details: []any{f}}
	if errType == ErrRateLimited || errType == ErrThrottled {
		// Waiting for budget is normal operation: benign errors are logged at debug
		// level and do not count as failures in the SDK's metrics.
		opts.Category = temporal.ApplicationErrorCategoryBenign
	}
	return temporal.NewApplicationErrorWithOptions(msg, errType, opts)
}

// Activities are paritysync's Temporal activities; the struct holds their dependencies.
type Activities struct {
	Limiter *limiter.Limiter
	Client  *channels.Client
	Tokens  channels.Credentials
	// Store is the system of record (PostgreSQL).
	Store     *store.Store
	Channels  map[string]models.ChannelConfig
	Validator *models.Validator
	// Mappings, when set, is the channels' configuration with the codes stored over
	// the API: PrepareBatch validates against it, so a property mapped after the
	// start is not refused as unmapped.
	Mappings *store.Mappings
	// ChunkSize is how many requests one ChannelSync child pushes.
	ChunkSize int
	// MaxInFlight bounds the pushes a batch keeps in flight per channel
	// (models.PlanInFlight); zero means models.DefaultMaxInFlight.
	MaxInFlight int
	// ShortWait is the longest wait for a held slot spent inside the activity rather
	// than in a durable timer; DefaultShortWait when zero.
	ShortWait time.Duration
	// Now is the clock for ledger and dead-letter timestamps.
	Now func() time.Time
	// Metrics may be nil.
	Metrics *Metrics

	rebuilds gateRebuilds
	// ahead and held are what this worker already knows of a lane's next request
	// (read with the current one) and of its held slot (from the current push's
	// Settle), so the next push on this worker skips a read and a decision.
	ahead requestCache
	held  heldSlots
}

func (a *Activities) now() time.Time {
	if a.Now != nil {
		return a.Now()
	}
	return time.Now()
}

// PrepareBatch validates a batch, records its desired state, drops what a newer
// version already overtook, coalesces and stores its requests, and returns a small
// plan of stored chunks. Every decision it takes (rejected, superseded) is recorded
// as the update's outcome, once: a retried PrepareBatch reports the stored counts.
func (a *Activities) PrepareBatch(ctx context.Context, in models.BatchSyncInput) (models.BatchPlan, error) {
	ms := in.Mutations
	if in.PayloadKey != "" {
		var err error
		if ms, err = a.Store.LoadBatch(ctx, in.PayloadKey); err != nil {
			return models.BatchPlan{}, payloadError(err)
		}
	}
	plan := models.BatchPlan{BatchID: in.BatchID, Mutations: len(ms)}
	var decided []store.MutationOutcome

	v := a.Validator
	if a.Mappings != nil {
		var err error
		if v, err = a.Mappings.ValidatorFor(ctx, a.Validator, ms); err != nil {
			return plan, err
		}
	}
	valid := make([]models.Mutation, 0, len(ms))
	var ranges []store.RangeMutation
	for i, m := range ms {
		// A mutation without an id gets one from its place in the batch, the same on
		// every attempt, so its outcome is recorded once.
		m.ApplyDefaults(func() string { return in.BatchID + "#" + strconv.Itoa(i) })
		if problems := v.Validate(m); len(problems) > 0 {
			decided = append(decided, store.MutationOutcome{MutationID: m.ID, Channel: m.Channel,
				Outcome: models.OutcomeRejected, Reason: problemsText(problems)})
			if len(plan.Rejected) < maxRejectionsInPlan {
				plan.Rejected = append(plan.Rejected, models.Rejection{MutationID: m.ID, Channel: m.Channel, Problems: problems})
			}
			continue
		}
		if !m.IsRange() {
			valid = append(valid, m)
			continue
		}
		// A range becomes its nights here, inside the activity: the batch's payload
		// and the workflow input keep the one mutation.
		ex := a.Validator.Expand(m)
		if len(valid)+len(ex.Nights) > models.MaxBatchNights {
			problems := models.ValidationError{{Field: "to", Rule: models.RuleBatchNights}}
			decided = append(decided, store.MutationOutcome{MutationID: m.ID, Channel: m.Channel,
				Outcome: models.OutcomeRejected, Reason: problemsText(problems)})
			if len(plan.Rejected) < maxRejectionsInPlan {
				plan.Rejected = append(plan.Rejected, models.Rejection{MutationID: m.ID, Channel: m.Channel, Problems: problems})
			}
			continue
		}
		ranges = append(ranges, store.RangeMutation{MutationID: m.ID, Nights: len(ex.Nights), Clipped: ex.Clipped})
		valid = append(valid, ex.Nights...)
	}
	if err := a.Store.RecordRanges(ctx, in.BatchID, ranges); err != nil {
		return plan, err
	}

	stale, err := a.Store.RecordDesired(ctx, valid)
	if err != nil {
		return plan, err
	}
	fresh := withoutParts(valid, stale)
	co := models.Coalesce(fresh, a.Channels)
	for _, p := range append(stale, co.Superseded...) {
		decided = append(decided, store.MutationOutcome{MutationID: p.ID, Channel: p.Channel, Family: p.Family,
			Outcome: models.OutcomeSuperseded, Reason: fmt.Sprintf("version %d superseded by %d", p.Version, p.By),
			Night: p.StayDate, Nights: p.Nights})
	}
	counts, err := a.recordDecided(ctx, in.BatchID, decided)
	if err != nil {
		return plan, err
	}
	for i := range co.Requests {
		co.Requests[i].KeySalt = in.ResendSalt
	}
	if err := a.storeChunks(ctx, in.BatchID, co.Requests, &plan, counts, updateKeys(decided)); err != nil {
		return plan, err
	}
	plan.InFlight = models.PlanInFlight(co.Requests, a.Channels, a.MaxInFlight)
	expected := make(map[string]int, len(counts))
	for _, c := range counts {
		plan.Decided = append(plan.Decided, *c)
		expected[c.Channel] = c.Total
	}
	// The batch's totals per channel, so that its progress (done of total) reads
	// from the store without asking the workflow.
	if err := a.Store.RecordExpected(ctx, in.BatchID, expected); err != nil {
		return plan, err
	}
	sort.Slice(plan.Decided, func(i, j int) bool { return plan.Decided[i].Channel < plan.Decided[j].Channel })
	activity.GetLogger(ctx).Info("batch prepared", "batch", in.BatchID, "mutations", len(ms),
		"requests", len(co.Requests), "chunks", len(plan.Chunks))
	return plan, nil
}

// maxRejectionsInPlan keeps the plan small; the counts still cover every rejection,
// and the store holds every one with its reason.
const maxRejectionsInPlan = 50

// problemsText is a rejection's reason as the outcome records it.
func problemsText(problems []models.FieldError) string {
	parts := make([]string, len(problems))
	for i, p := range problems {
		parts[i] = p.Error()
	}
	return strings.Join(parts, "; ")
}

// withoutParts removes the superseded family parts from ms, dropping mutations left
// with no family.
func withoutParts(ms []models.Mutation, parts []models.Superseded) []models.Mutation {
	if len(parts) == 0 {
		return ms
	}
	type key struct {
		id, channel string
		version     int64
		night       models.Date // of a range's night; zero for a stay_date mutation
	}
	drop := map[key][]models.Family{}
	for _, p := range parts {
		k := key{p.ID, p.Channel, p.Version, p.StayDate}
		drop[k] = append(drop[k], p.Family)
	}
	out := make([]models.Mutation, 0, len(ms))
	for _, m := range ms {
		for _, f := range drop[key{m.ID, m.Channel, m.Version, m.RangeNight()}] {
			m = m.Without(f)
		}
		if len(m.Families()) > 0 {
			out = append(out, m)
		}
	}
	return out
}

// recordDecided records the outcomes PrepareBatch decided and returns, per channel,
// the stored tallies: the first attempt's, on every retry.
func (a *Activities) recordDecided(ctx context.Context, batchID string, os []store.MutationOutcome) (map[string]*models.ChannelCounts, error) {
	by := map[string][]store.MutationOutcome{}
	for _, o := range os {
		by[o.Channel] = append(by[o.Channel], o)
	}
	counts := map[string]*models.ChannelCounts{}
	for ch, list := range by {
		stored, err := a.Store.RecordOutcomes(ctx, batchID, list)
		if err != nil {
			return nil, err
		}
		c := &models.ChannelCounts{Channel: ch}
		c.Rejected, c.Superseded = stored[models.OutcomeRejected], stored[models.OutcomeSuperseded]
		c.Committed, c.DeadLettered = stored[models.OutcomeCommitted], stored[models.OutcomeDeadLettered]
		c.Total = len(updateKeys(list))
		counts[ch] = c
	}
	return counts, nil
}

// updateKey is one update: a mutation's part in one family on one channel (the
// family empty for a mutation rejected whole). The nights of a range share it.
type updateKey struct {
	channel, id string
	family      models.Family
}

// updateKeys is the set of updates os decide.
func updateKeys(os []store.MutationOutcome) map[updateKey]bool {
	keys := make(map[updateKey]bool, len(os))
	for _, o := range os {
		keys[updateKey{o.Channel, o.MutationID, o.Family}] = true
	}
	return keys
}

// storeChunks cuts the requests into chunks per channel and priority, most urgent
// first, stores them and adds them to the plan.
func (a *Activities) storeChunks(ctx context.Context, batchID string, reqs []models.ChannelRequest,
	plan *models.BatchPlan, counts map[string]*models.ChannelCounts, decided map[updateKey]bool) error {
	size := a.ChunkSize
	if size <= 0 {
		size = config.DefaultSettings().ChunkSize
	}
	type group struct {
		channel  string
		priority int
	}
	by := map[group][]models.ChannelRequest{}
	var order []group
	counted := map[updateKey]bool{}
	for _, r := range reqs {
		g := group{r.Channel, r.Priority}
		if _, ok := by[g]; !ok {
			order = append(order, g)
		}
		by[g] = append(by[g], r)
		c := counts[r.Channel]
		if c == nil {
			c = &models.ChannelCounts{Channel: r.Channel}
			counts[r.Channel] = c
		}
		for _, ref := range r.Refs {
			// The nights of a range are one update: counted once, and not again
			// when PrepareBatch superseded some of its nights already.
			k := updateKey{r.Channel, ref.ID, r.Family}
			if !counted[k] && !decided[k] {
				counted[k] = true
				c.Total++
			}
		}
	}
	sort.SliceStable(order, func(i, j int) bool {
		if order[i].priority != order[j].priority {
			return order[i].priority < order[j].priority
		}
		return order[i].channel < order[j].channel
	})
	for _, g := range order {
		rs := by[g]
		for n := 0; len(rs) > 0; n++ {
			part := rs[:min(size, len(rs))]
			rs = rs[len(part):]
			c := models.Chunk{Channel: g.channel, Priority: g.priority, N: n, Requests: len(part)}
			inChunk := map[updateKey]bool{}
			for _, r := range part {
				for _, ref := range r.Refs {
					inChunk[updateKey{r.Channel, ref.ID, r.Family}] = true
				}
			}
			c.Updates = len(inChunk)
			key, err := a.Store.SaveChunk(ctx, batchID, c, part)
			if err != nil {
				return err
			}
			c.Key = key
			plan.Chunks = append(plan.Chunks, c)
		}
	}
	return nil
}

// permanent types the limiter errors that no retry can cure (a family without a
// budget share, a channel the limiter does not know, an invalid request) as
// Rejected, so the request is dead-lettered with the reason instead of retried.
func permanent(err error) error {
	if errors.Is(err, limiter.ErrNoBudget) || errors.Is(err, limiter.ErrUnknownChannel) ||
		errors.Is(err, limiter.ErrInvalidRequest) {
		return FailureError(ErrRejected, Failure{Message: err.Error()})
	}
	return err
}

// quotaStop holds every worker off family f of channel until its daily quota resets
// (the next UTC midnight by the Redis clock), after the channel said that quota is
// spent: no further request of f goes out to be refused, and the channel's other
// families go on. It returns the wait; the stop shows in `starter quota` and
// intake refuses changes of f meanwhile.
func (a *Activities) quotaStop(ctx context.Context, channel string, f models.Family) time.Duration {
	wait := time.Hour // the reset cannot be read: hold off a while, then ask again
	if st, err := a.Limiter.Status(ctx, channel); err == nil && st.QuotaResetsIn > 0 {
		wait = st.QuotaResetsIn
	}
	if err := a.Limiter.StopFamily(ctx, channel, f, wait); err != nil {
		activity.GetLogger(ctx).Warn("quota stop", "channel", channel, "family", f, "error", err)
	}
	activity.GetLogger(ctx).Warn("channel quota exhausted: family stopped until the reset", "channel", channel,
		"family", f, "wait", wait)
	return wait
}

// supersede records refs of req as superseded by a newer version the gate already
// sent, and returns how many of them are superseded as stored.
func (a *Activities) supersede(ctx context.Context, batchID string, req models.ChannelRequest, refs []models.MutationRef) (int, error) {
	if len(refs) == 0 {
		return 0, nil
	}
	os := make([]store.MutationOutcome, len(refs))
	for i, ref := range refs {
		os[i] = store.MutationOutcome{MutationID: ref.ID, Channel: req.Channel, Family: req.Family,
			Outcome: models.OutcomeSuperseded, Reason: "a newer version was sent", Night: ref.StayDate, Nights: ref.Nights}
	}
	counts, err := a.Store.RecordOutcomes(ctx, batchID, os)
	if err != nil {
		return 0, err
	}
	return counts[models.OutcomeSuperseded], nil
}

// acknowledge records what the channel confirmed of send (cut from orig by the
// gate): every line of a 2xx, the accepted lines of a partial success, and the refs
// the gate dropped as superseded, in one transaction. The failed lines are handed
// back numbered as in orig, so they can be parked from it.
func (a *Activities) acknowledge(ctx context.Context, batchID string, orig, send models.ChannelRequest,
	dropped []models.MutationRef, resp channels.PushResponse) (models.PushResult, error) {
	res := models.PushResult{ConfirmationID: resp.ConfirmationID}
	var failed []int
	for _, lf := range resp.Failed {
		failed = append(failed, lf.Line)
		res.Failed = append(res.Failed, models.FailedLine{Line: originLine(orig, send, lf.Line), Code: lf.Code, Message: lf.Message})
	}
	for _, ref := range send.Refs {
		if slices.Contains(failed, ref.Line) {
			res.FailedRefs = append(res.FailedRefs, ref)
		}
	}
	var err error
	res.Committed, res.Superseded, err = a.Store.RecordAcknowledged(ctx, store.Ack{BatchID: batchID, Request: send,
		ConfirmationID: resp.ConfirmationID, FailedLines: failed, Superseded: dropped})
	if err != nil {
		return models.PushResult{}, err
	}
	a.Metrics.commit(send.Channel, res.Committed)
	return res, nil
}

// originLine is the index in orig of the line that carries line i of sent, a cut of
// orig made by WithoutNights.
func originLine(orig, sent models.ChannelRequest, i int) int {
	if i < 0 || i >= len(sent.Lines) {
		return i
	}
	l := sent.Lines[i]
	for k, o := range orig.Lines {
		if o.RoomTypeCode == l.RoomTypeCode && o.RatePlanCode == l.RatePlanCode && o.Covers(l.From) {
			return k
		}
	}
	return i
}

// RecordDeadLetter parks a request, or the listed lines of it, as a dead letter in
// the store, with the dead-lettered outcome of each of its updates.
func (a *Activities) RecordDeadLetter(ctx context.Context, in models.DeadLetterInput) (models.DeadLetterResult, error) {
	if in.Index != models.WholeChunk {
		res, err := a.park(ctx, in)
		if errors.Is(err, store.ErrBatchNotFound) {
			activity.GetLogger(ctx).Error("request gone before it could be parked; reconciliation re-sends its cells",
				"chunk", in.ChunkKey, "request", in.Index, "batch", in.BatchID)
			return res, nil
		}
		return res, err
	}
	var total models.DeadLetterResult
	for i := 0; ; i++ {
		in.Index = i
		res, err := a.park(ctx, in)
		if errors.Is(err, store.ErrBatchNotFound) {
			return total, nil // past the chunk's last request
		}
		if err != nil {
			return total, err
		}
		total.Updates += res.Updates
		total.EntryID = res.EntryID
	}
}

// park parks request in.Index (or the listed lines of it). A request that is gone
// from the store (its batch released) cannot be parked: its cells are left to
// reconciliation, which re-sends the desired state of every unacknowledged cell.
func (a *Activities) park(ctx context.Context, in models.DeadLetterInput) (models.DeadLetterResult, error) {
	req, err := a.Store.Request(ctx, in.ChunkKey, in.Index)
	if err != nil {
		return models.DeadLetterResult{}, err
	}
	if len(in.Lines) > 0 {
		req = onlyLines(req, in.Lines)
	}
	id, parked, err := a.Store.ParkDeadLetter(ctx, store.DeadLetter{BatchID: in.BatchID, Reason: in.Reason,
		Status: in.Status, Message: in.Message, Request: req})
	if err != nil {
		return models.DeadLetterResult{}, err
	}
	res := models.DeadLetterResult{Updates: len(req.Refs), EntryID: strconv.FormatInt(id, 10)}
	if in.Reason == models.ReasonChildFailed {
		// A failed child's chunk is parked whole, committed requests too: only the
		// updates that had no outcome were dead-lettered.
		if res.Updates, err = a.Store.DeadLettered(ctx, in.BatchID, req); err != nil {
			return models.DeadLetterResult{}, err
		}
	}
	if !parked {
		activity.GetLogger(ctx).Debug("already dead-lettered", "channel", req.Channel, "batch", in.BatchID, "request", in.Index)
		return res, nil
	}
	a.Metrics.park(req.Channel, in.Reason, res.Updates)
	activity.GetLogger(ctx).Warn("dead-lettered", "channel", req.Channel, "batch", in.BatchID,
		"reason", in.Reason, "status", in.Status, "updates", res.Updates, "entry", id)
	return res, nil
}

// CancelBatch closes a cancelled batch: every update of its stored requests that
// has no outcome yet gets the outcome cancelled (what was pushed before the cancel
// keeps its own), and it returns the batch's outcomes as stored, per channel.
// BatchSync calls it once its children stopped.
func (a *Activities) CancelBatch(ctx context.Context, in models.CancelInput) ([]models.ChannelCounts, error) {
	reason := in.Reason
	if reason == "" {
		reason = "batch cancelled"
	}
	n, err := a.Store.CancelPending(ctx, in.BatchID, reason)
	if err != nil {
		return nil, err
	}
	activity.GetLogger(ctx).Warn("batch cancelled", "batch", in.BatchID, "cancelled_updates", n)
	return a.Store.BatchCounts(ctx, in.BatchID)
}

// PruneStore deletes what outlived its retention in the store (store.DefaultRetention);
// the nightly reconciliation calls it.
func (a *Activities) PruneStore(ctx context.Context) (store.Pruned, error) {
	p, err := a.Store.Prune(ctx, store.DefaultRetention())
	if err != nil {
		return p, err
	}
	if _, err := a.Store.PruneStaged(ctx, a.now().Add(-stagedRetention)); err != nil {
		return p, err
	}
	if _, err := a.Store.PrunePosts(ctx, a.now().Add(-store.DefaultRetention().Outcomes)); err != nil {
		return p, err
	}
	activity.GetLogger(ctx).Info("store pruned", "cells", p.Cells, "payloads", p.Payloads, "requests", p.Requests,
		"batches", p.Batches, "dead_letters", p.DeadLetters)
	return p, nil
}

// ReleaseBatch drops a finished batch's payload and stored requests; BatchSync calls
// it once every update has an outcome. Outcomes and dead letters stay.
func (a *Activities) ReleaseBatch(ctx context.Context, batchID string) error {
	return a.Store.ReleaseBatch(ctx, batchID)
}

// onlyLines is r cut down to the given lines, with refs renumbered to match.
func onlyLines(r models.ChannelRequest, lines []int) models.ChannelRequest {
	keep := map[int]int{}
	out := r
	out.Lines, out.Refs = nil, nil
	for _, l := range lines {
		if l >= 0 && l < len(r.Lines) {
			if _, dup := keep[l]; !dup {
				keep[l] = len(out.Lines)
				out.Lines = append(out.Lines, r.Lines[l])
			}
		}
	}
	for _, ref := range r.Refs {
		if n, ok := keep[ref.Line]; ok {
			ref.Line = n
			out.Refs = append(out.Refs, ref)
		}
	}
	return out
}
