package activities

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"go.temporal.io/sdk/activity"

	"github.com/paritysync/paritysync/activities/store"
	"github.com/paritysync/paritysync/config"
	"github.com/paritysync/paritysync/models"
)

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
