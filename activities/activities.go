package activities

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/google/uuid"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"

	"github.com/paritysync/paritysync/channels"
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
	ErrQuotaExhausted = "QuotaExhausted" // daily budget spent: dead-letter for reconciliation
	ErrRejected       = "Rejected"       // other 4xx: dead-letter now
)

// NonRetryableErrors lists the typed errors for activity RetryPolicies.
var NonRetryableErrors = []string{ErrRateLimited, ErrThrottled, ErrTransient, ErrAuthExpired, ErrQuotaExhausted, ErrRejected}

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
	Limiter   *limiter.Limiter
	Client    *channels.Client
	Tokens    channels.Credentials
	Store     *Store
	Channels  map[string]models.ChannelConfig
	Validator *models.Validator
	// ChunkSize is how many requests one ChannelSync child pushes.
	ChunkSize int
	// ShortWait is the longest wait for a held slot spent inside the activity rather
	// than in a durable timer; DefaultShortWait when zero.
	ShortWait time.Duration
	// Now is the clock for ledger and dead-letter timestamps.
	Now func() time.Time
	// Metrics may be nil.
	Metrics *Metrics
}

func (a *Activities) now() time.Time {
	if a.Now != nil {
		return a.Now()
	}
	return time.Now()
}

// PrepareBatch validates, stale-guards, coalesces and stores a batch's requests, and
// returns a small plan of stored chunks.
func (a *Activities) PrepareBatch(ctx context.Context, in models.BatchSyncInput) (models.BatchPlan, error) {
	ms := in.Mutations
	if in.PayloadKey != "" {
		var err error
		if ms, err = a.Store.LoadBatch(ctx, in.PayloadKey); err != nil {
			return models.BatchPlan{}, err
		}
	}
	plan := models.BatchPlan{BatchID: in.BatchID, Mutations: len(ms)}
	decided := map[string]*models.ChannelCounts{}
	counts := func(ch string) *models.ChannelCounts {
		if decided[ch] == nil {
			decided[ch] = &models.ChannelCounts{Channel: ch}
		}
		return decided[ch]
	}

	valid := make([]models.Mutation, 0, len(ms))
	for _, m := range ms {
		m.ApplyDefaults(uuid.NewString)
		if problems := a.Validator.Validate(m); len(problems) > 0 {
			c := counts(m.Channel)
			c.Total++
			c.Rejected++
			if len(plan.Rejected) < maxRejectionsInPlan {
				plan.Rejected = append(plan.Rejected, models.Rejection{MutationID: m.ID, Channel: m.Channel, Problems: problems})
			}
			continue
		}
		valid = append(valid, m)
	}

	fresh, stale, err := a.dropStale(ctx, valid)
	if err != nil {
		return plan, err
	}
	for _, ch := range stale {
		c := counts(ch)
		c.Total++
		c.Superseded++
	}

	co := models.Coalesce(fresh, a.Channels)
	for i := range co.Requests {
		co.Requests[i].KeySalt = in.ResendSalt
	}
	for _, s := range co.Superseded {
		c := counts(s.Channel)
		c.Total++
		c.Superseded++
	}
	if err := a.storeChunks(ctx, in.BatchID, co.Requests, &plan, counts); err != nil {
		return plan, err
	}
	for _, c := range decided {
		plan.Decided = append(plan.Decided, *c)
	}
	sort.Slice(plan.Decided, func(i, j int) bool { return plan.Decided[i].Channel < plan.Decided[j].Channel })
	activity.GetLogger(ctx).Info("batch prepared", "batch", in.BatchID, "mutations", len(ms),
		"requests", len(co.Requests), "chunks", len(plan.Chunks))
	return plan, nil
}

// maxRejectionsInPlan keeps the plan small; the counts still cover every rejection.
const maxRejectionsInPlan = 50

// dropStale removes the family parts of mutations older than what the ledger already
// committed for their cell, returning the rest and one channel name per dropped part.
func (a *Activities) dropStale(ctx context.Context, ms []models.Mutation) ([]models.Mutation, []string, error) {
	var cells []models.Cell
	var fams []models.Family
	var owner []int
	for i, m := range ms {
		for _, f := range m.Families() {
			cells = append(cells, m.Cell())
			fams = append(fams, f)
			owner = append(owner, i)
		}
	}
	if len(cells) == 0 {
		return ms, nil, nil
	}
	versions, err := a.Store.CommittedVersions(ctx, cells, fams)
	if err != nil {
		return nil, nil, fmt.Errorf("stale guard: %w", err)
	}
	staleFams := map[int][]models.Family{}
	var stale []string
	for k, v := range versions {
		if m := ms[owner[k]]; v > m.Version {
			staleFams[owner[k]] = append(staleFams[owner[k]], fams[k])
			stale = append(stale, m.Channel)
		}
	}
	if len(stale) == 0 {
		return ms, nil, nil
	}
	out := make([]models.Mutation, 0, len(ms))
	for i, m := range ms {
		for _, f := range staleFams[i] {
			m = m.Without(f)
		}
		if len(m.Families()) > 0 {
			out = append(out, m)
		}
	}
	return out, stale, nil
}

// storeChunks cuts the requests into chunks per channel and priority, most urgent
// first, stores them and adds them to the plan.
func (a *Activities) storeChunks(ctx context.Context, batchID string, reqs []models.ChannelRequest,
	plan *models.BatchPlan, counts func(string) *models.ChannelCounts) error {
	size := a.ChunkSize
	if size <= 0 {
		size = 25
	}
	type group struct {
		channel  string
		priority int
	}
	by := map[group][]models.ChannelRequest{}
	var order []group
	for _, r := range reqs {
		g := group{r.Channel, r.Priority}
		if _, ok := by[g]; !ok {
			order = append(order, g)
		}
		by[g] = append(by[g], r)
		c := counts(r.Channel)
		c.Total += len(r.Refs)
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
			for _, r := range part {
				c.Updates += len(r.Refs)
			}
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

// PushRequest sends one stored request through the limiter to its channel and
// records what came of it. The limiter's Reserve holds the request's slot and, once it
// is due, drops the nights a newer version already went out for (superseded) and
// leases the rest until the outcome is known. A slot a few seconds away is waited
// out here; a later one comes back as a typed RateLimited error carrying the wait,
// for a durable timer. With in.NextReservation set, the lane's next request's slot is
// reserved once this one has its outcome, and returned in PushResult.Next.
func (a *Activities) PushRequest(ctx context.Context, in models.PushInput) (models.PushResult, error) {
	log := activity.GetLogger(ctx)
	req, err := a.Store.Request(ctx, in.ChunkKey, in.Index)
	if err != nil {
		return models.PushResult{}, err
	}
	cfg, ok := a.Channels[req.Channel]
	if !ok {
		return models.PushResult{}, FailureError(ErrRejected, Failure{Message: "unknown channel " + req.Channel})
	}
	lr := limiter.Request{Channel: req.Channel, Family: req.Family, Property: req.PropertyID,
		Priority: req.Priority, Cost: cfg.Cost(req), ID: in.Reservation, Lines: req.Lines}
	if lr.ID == "" {
		lr.ID = models.ReservationID(in.ChunkKey, in.Index)
	}
	d, err := a.reserve(ctx, lr)
	if err != nil {
		// Fail closed: no decision, no call; Temporal retries the activity. The
		// limiter's error already names the channel.
		return models.PushResult{}, err
	}
	switch d.State {
	case limiter.Send:
	case limiter.Superseded:
		log.Info("superseded before sending", "channel", req.Channel, "property", req.PropertyID,
			"family", req.Family, "updates", len(req.Refs))
		res := models.PushResult{Superseded: len(req.Refs)}
		res.Next = a.reserveNext(ctx, in)
		return res, nil
	case limiter.Quota:
		a.Metrics.deny(req.Channel, string(d.Tier))
		return models.PushResult{}, FailureError(ErrQuotaExhausted, Failure{Wait: d.Wait, Tier: string(d.Tier),
			Message: fmt.Sprintf("daily quota %d/%d", d.DailyUsed, d.DailyLimit)})
	default:
		a.Metrics.deny(req.Channel, string(d.Tier))
		f := Failure{Wait: d.Wait, Tier: string(d.Tier), Paused: d.PausedReason, Held: d.State == limiter.Wait}
		if d.State == limiter.Breaker {
			// Named in the failure so the wait reads as the breaker's in the history.
			f.Message = "circuit breaker open"
		}
		return models.PushResult{}, FailureError(ErrRateLimited, f)
	}
	defer func() {
		// The lease ends with the outcome; a lost release only delays the nights'
		// next request until the lease expires.
		if err := a.Limiter.Release(context.WithoutCancel(ctx), lr); err != nil {
			log.Warn("release lease", "channel", req.Channel, "error", err)
		}
	}()
	send, dropped := req.WithoutNights(d.Dropped)
	if in.RefreshCredential {
		if err := a.Tokens.Refresh(ctx, req.Channel); err != nil {
			return models.PushResult{}, fmt.Errorf("refresh credential for %s: %w", req.Channel, err)
		}
	}

	resp, err := a.Client.Push(ctx, send)
	if err != nil {
		return models.PushResult{}, fmt.Errorf("push %s/%s: %w", req.Channel, req.Family, err)
	}
	if resp.HasRateLimit {
		if err := a.Limiter.Adapt(ctx, req.Channel, req.PropertyID, req.Family,
			resp.RateLimit.Limit, resp.RateLimit.Remaining, resp.RateLimit.Reset); err != nil {
			log.Warn("adapt rate", "channel", req.Channel, "error", err)
		}
	}
	a.Metrics.push(req.Channel, string(req.Family), resp.Class)
	a.feedBreaker(ctx, req.Channel, resp.Class)
	log.Info("pushed", "channel", req.Channel, "family", req.Family, "property", req.PropertyID,
		"lines", len(send.Lines), "dropped_nights", len(d.Dropped), "status", resp.Status, "class", resp.Class)

	f := Failure{Status: resp.Status, Message: resp.Message}
	switch resp.Class {
	case channels.ClassCommitted:
		committed, superseded, err := a.Store.Commit(ctx, send, resp.ConfirmationID, nil, a.now())
		if err != nil {
			return models.PushResult{}, err
		}
		a.Metrics.commit(req.Channel, committed)
		res := models.PushResult{ConfirmationID: resp.ConfirmationID, Committed: committed,
			Superseded: superseded + len(dropped)}
		res.Next = a.reserveNext(ctx, in)
		return res, nil
	case channels.ClassPartial:
		res, err := a.commitPartial(ctx, req, send, resp)
		if err != nil {
			return models.PushResult{}, err
		}
		res.Superseded += len(dropped)
		res.Next = a.reserveNext(ctx, in)
		return res, nil
	case channels.ClassThrottled:
		f.Wait, f.ServerWait = resp.RetryAfter, resp.ServerWait
		if f.ServerWait && f.Wait > 0 {
			// Every worker holds back, not just this activity.
			if err := a.Limiter.Backoff(ctx, req.Channel, f.Wait); err != nil {
				log.Warn("channel back-off", "channel", req.Channel, "error", err)
			}
		}
		return models.PushResult{}, FailureError(ErrThrottled, f)
	case channels.ClassTransient:
		return models.PushResult{}, FailureError(ErrTransient, f)
	case channels.ClassAuthExpired:
		return models.PushResult{}, FailureError(ErrAuthExpired, f)
	case channels.ClassQuotaExhausted:
		return models.PushResult{}, FailureError(ErrQuotaExhausted, f)
	default:
		return models.PushResult{}, FailureError(ErrRejected, f)
	}
}

// feedBreaker tells the channel's circuit breaker what a push came to: a 5xx or a
// timeout counts toward opening it, any answer that shows the channel up closes it,
// and throttling says nothing about the channel's health.
func (a *Activities) feedBreaker(ctx context.Context, channel string, class channels.Class) {
	if class == channels.ClassThrottled {
		return
	}
	st, changed, err := a.Limiter.Outcome(ctx, channel, class != channels.ClassTransient)
	if err != nil {
		activity.GetLogger(ctx).Warn("circuit breaker", "channel", channel, "error", err)
		return
	}
	if changed {
		a.Metrics.breaker(channel, st)
		activity.GetLogger(ctx).Warn("circuit breaker "+st, "channel", channel)
	}
}

// DefaultShortWait is how long PushRequest waits in process for a held slot.
const DefaultShortWait = 2 * time.Second

// reserve asks the limiter for r's slot, waiting in process for a slot at most
// ShortWait away: a durable timer for a second or two would cost more than it saves.
func (a *Activities) reserve(ctx context.Context, r limiter.Request) (limiter.Decision, error) {
	short := a.ShortWait
	if short <= 0 {
		short = DefaultShortWait
	}
	for range 3 {
		d, err := a.Limiter.Reserve(ctx, r)
		if err != nil || d.State != limiter.Wait || d.Wait > short {
			return d, err
		}
		t := time.NewTimer(d.Wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return limiter.Decision{}, ctx.Err()
		case <-t.C:
		}
	}
	return a.Limiter.Reserve(ctx, r)
}

// ReserveSlots holds the slots of the first request of each of a ChannelSync's lanes,
// in one activity instead of one push per lane that would only come back with a
// wait. A request the limiter cannot hold a slot for now is left out: its lane asks
// when it pushes.
func (a *Activities) ReserveSlots(ctx context.Context, in models.ReserveSlotsInput) ([]models.Slot, error) {
	var out []models.Slot
	for k, i := range in.Indexes {
		if s := a.reserveNext(ctx, models.PushInput{ChunkKey: in.ChunkKey, Next: i, NextReservation: in.Reservations[k]}); s != nil {
			out = append(out, *s)
		}
	}
	return out, nil
}

// reserveNext holds the slot of the lane's next request, if it named one. Failing to
// hold one is not this request's failure: the next request then asks for itself.
func (a *Activities) reserveNext(ctx context.Context, in models.PushInput) *models.Slot {
	if in.NextReservation == "" {
		return nil
	}
	req, err := a.Store.Request(ctx, in.ChunkKey, in.Next)
	if err != nil {
		return nil
	}
	cfg, ok := a.Channels[req.Channel]
	if !ok {
		return nil
	}
	d, err := a.Limiter.Reserve(ctx, limiter.Request{Channel: req.Channel, Family: req.Family,
		Property: req.PropertyID, Priority: req.Priority, Cost: cfg.Cost(req), ID: in.NextReservation, Hold: true})
	if err != nil || d.State != limiter.Wait {
		return nil
	}
	return &models.Slot{Index: in.Next, Wait: d.Wait}
}

// commitPartial commits the lines a channel accepted and hands back the failed ones,
// numbered as in the stored request (orig) so they can be parked from it.
func (a *Activities) commitPartial(ctx context.Context, orig, req models.ChannelRequest, resp channels.PushResponse) (models.PushResult, error) {
	failed := map[int]bool{}
	res := models.PushResult{ConfirmationID: resp.ConfirmationID}
	for _, lf := range resp.Failed {
		failed[lf.Line] = true
		res.Failed = append(res.Failed, models.FailedLine{Line: originLine(orig, req, lf.Line), Code: lf.Code, Message: lf.Message})
	}
	for _, ref := range req.Refs {
		if failed[ref.Line] {
			res.FailedRefs = append(res.FailedRefs, ref)
		}
	}
	var err error
	res.Committed, res.Superseded, err = a.Store.Commit(ctx, req, resp.ConfirmationID, failed, a.now())
	if err != nil {
		return models.PushResult{}, err
	}
	a.Metrics.commit(req.Channel, res.Committed)
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
		if o.RoomTypeCode == l.RoomTypeCode && o.RatePlanCode == l.RatePlanCode && !l.From.Before(o.From) && !l.From.After(o.To) {
			return k
		}
	}
	return i
}

// RecordDeadLetter parks a request, or the listed lines of it, in its channel's
// dead-letter stream for reconciliation.
func (a *Activities) RecordDeadLetter(ctx context.Context, in models.DeadLetterInput) (models.DeadLetterResult, error) {
	if in.Index != models.WholeChunk {
		return a.park(ctx, in)
	}
	var total models.DeadLetterResult
	for i := 0; ; i++ {
		in.Index = i
		res, err := a.park(ctx, in)
		if errors.Is(err, ErrBatchNotFound) {
			if i == 0 {
				// The chunk outlived BatchTTL: nothing is left to park.
				activity.GetLogger(ctx).Error("chunk expired before it could be parked", "chunk", in.ChunkKey, "batch", in.BatchID)
			}
			return total, nil
		}
		if err != nil {
			return total, err
		}
		total.Updates += res.Updates
		total.EntryID = res.EntryID
	}
}

// park parks request in.Index (or the listed lines of it).
func (a *Activities) park(ctx context.Context, in models.DeadLetterInput) (models.DeadLetterResult, error) {
	req, err := a.Store.Request(ctx, in.ChunkKey, in.Index)
	if err != nil {
		return models.DeadLetterResult{}, err
	}
	if len(in.Lines) > 0 {
		req = onlyLines(req, in.Lines)
	}
	sum := sha256.Sum256(fmt.Appendf(nil, "%s|%d|%v", in.ChunkKey, in.Index, in.Lines))
	id, err := a.Store.Park(ctx, DeadLetter{BatchID: in.BatchID, Reason: in.Reason, Status: in.Status,
		Message: in.Message, At: a.now(), Request: req, Channel: req.Channel, Property: req.PropertyID},
		hex.EncodeToString(sum[:12]))
	if err != nil {
		return models.DeadLetterResult{}, err
	}
	if id == "" {
		activity.GetLogger(ctx).Debug("already dead-lettered", "channel", req.Channel, "batch", in.BatchID, "request", in.Index)
		return models.DeadLetterResult{Updates: len(req.Refs)}, nil
	}
	a.Metrics.park(req.Channel, in.Reason, len(req.Refs))
	activity.GetLogger(ctx).Warn("dead-lettered", "channel", req.Channel, "batch", in.BatchID,
		"reason", in.Reason, "status", in.Status, "updates", len(req.Refs))
	return models.DeadLetterResult{Updates: len(req.Refs), EntryID: id}, nil
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
