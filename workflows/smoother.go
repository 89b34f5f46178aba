package workflows

import (
	"errors"
	"fmt"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/paritysync/paritysync/models"
)

// BurstSmoother is a long-lived entity per channel (smoother/<channel>) that turns a
// storm of small PMS submissions into few batches: it takes mutations by update,
// refuses them when too many are waiting (admission control, so the PMS retries
// later instead of the channel's quota collapsing), waits for the burst to calm
// (debounce), and runs what gathered as a BatchSync. A batch starts when none
// runs, or beside the running ones for work more urgent than all of them: an
// urgent change never waits for a bulk batch, and the batches running at once are
// bounded by the priority levels (back-pressure).
func BurstSmoother(ctx workflow.Context, in models.SmootherInput) error {
	s := &smoother{in: withSmootherDefaults(in), pending: in.Pending, flushed: in.Flushed,
		totals: models.ChannelCounts{Channel: in.Channel}}
	return s.run(ctx)
}

func withSmootherDefaults(in models.SmootherInput) models.SmootherInput {
	if in.Debounce <= 0 {
		in.Debounce = models.DefaultDebounce
	}
	if in.MaxBatch <= 0 || in.MaxBatch > models.MaxInlineMutations {
		in.MaxBatch = models.MaxInlineMutations
	}
	if in.MaxPending <= 0 {
		in.MaxPending = models.DefaultMaxPending
	}
	return in
}

type smoother struct {
	in        models.SmootherInput
	pending   []models.Mutation
	flushed   int
	submits   int
	lastBatch string
	totals    models.ChannelCounts
	// running holds the most urgent priority of each batch still running.
	running []int
}

var errEmptySubmit = errors.New("submit: no mutations")

func (s *smoother) run(ctx workflow.Context) error {
	if err := workflow.SetQueryHandler(ctx, models.QueryStatus, func() (models.SmootherStatus, error) {
		return models.SmootherStatus{Channel: s.in.Channel, Pending: len(s.pending),
			MaxPending: s.in.MaxPending, Flushed: s.flushed, Running: len(s.running),
			LastBatch: s.lastBatch, Totals: s.totals}, nil
	}); err != nil {
		return fmt.Errorf("status query: %w", err)
	}
	if err := workflow.SetUpdateHandlerWithOptions(ctx, models.UpdateSubmit,
		func(ctx workflow.Context, ms []models.Mutation) (models.SubmitResult, error) {
			s.pending = append(s.pending, ms...)
			s.submits++
			return models.SubmitResult{Accepted: len(ms), Pending: len(s.pending)}, nil
		},
		workflow.UpdateHandlerOptions{Validator: func(ctx workflow.Context, ms []models.Mutation) error {
			if len(ms) == 0 {
				return errEmptySubmit
			}
			// A validator must not change state: refused submits leave no history.
			if len(s.pending)+len(ms) > s.in.MaxPending {
				return temporal.NewApplicationError(fmt.Sprintf("smoother %s is full (%d waiting, at most %d): retry later",
					s.in.Channel, len(s.pending), s.in.MaxPending), models.ErrSmootherFull)
			}
			return nil
		}},
	); err != nil {
		return fmt.Errorf("submit update: %w", err)
	}

	for {
		// A full history waits for the running batches to report, so the next run
		// starts with none: its back-pressure knows what runs. Meanwhile work more
		// urgent than them still starts.
		canContinue := func() bool { return historyFull(ctx) && len(s.running) == 0 }
		if err := workflow.Await(ctx, func() bool { return s.eligible() > 0 || canContinue() }); err != nil {
			return err
		}
		if !canContinue() {
			s.debounce(ctx)
			s.flush(ctx)
			continue
		}
		// Submits in flight land in this run's state before it is handed on.
		if err := workflow.Await(ctx, func() bool { return workflow.AllHandlersFinished(ctx) }); err != nil {
			return err
		}
		next := s.in
		next.Pending, next.Flushed = s.pending, s.flushed
		return workflow.NewContinueAsNewError(ctx, BurstSmoother, next)
	}
}

// eligible is how many of the waiting mutations may start a batch now: all of
// them when no batch runs, else those more urgent than every running batch.
func (s *smoother) eligible() int {
	n := 0
	for _, m := range s.pending {
		if s.mayStart(m.EffectivePriority()) {
			n++
		}
	}
	return n
}

func (s *smoother) mayStart(priority int) bool {
	for _, p := range s.running {
		if priority >= p {
			return false
		}
	}
	return true
}

// cut is the next batch's share of the waiting mutations: the urgent ones alone
// when some are eligible, so they go with the short debounce, else every
// eligible one; in arrival order, at most MaxBatch.
func (s *smoother) cut() (take, keep []models.Mutation, urgent bool) {
	for _, m := range s.pending {
		if p := m.EffectivePriority(); p <= models.PriorityUrgent && s.mayStart(p) {
			urgent = true
			break
		}
	}
	for _, m := range s.pending {
		p := m.EffectivePriority()
		ok := s.mayStart(p) && (!urgent || p <= models.PriorityUrgent)
		if ok && len(take) < s.in.MaxBatch {
			take = append(take, m)
		} else {
			keep = append(keep, m)
		}
	}
	return take, keep, urgent
}

// debounce waits until no submit arrived for the debounce time (UrgentDebounce at
// most when urgent work waits) or a full batch is waiting.
func (s *smoother) debounce(ctx workflow.Context) {
	for {
		take, _, urgent := s.cut()
		if len(take) >= s.in.MaxBatch {
			return
		}
		wait := s.in.Debounce
		if urgent {
			wait = min(wait, models.UrgentDebounce)
		}
		seen := s.submits
		more, err := workflow.AwaitWithTimeout(ctx, wait, func() bool { return s.submits != seen })
		if err != nil || !more {
			return
		}
	}
}

// flush starts the next batch (cut) as a BatchSync child and returns at once; the
// child's result is counted when it ends.
func (s *smoother) flush(ctx workflow.Context) {
	take, keep, _ := s.cut()
	if len(take) == 0 {
		return
	}
	s.pending = keep
	priority := take[0].EffectivePriority()
	for _, m := range take[1:] {
		priority = min(priority, m.EffectivePriority())
	}
	s.flushed++
	batchID := fmt.Sprintf("smoother-%s-%s-%d", s.in.Channel, workflow.Now(ctx).UTC().Format("20060102T150405"), s.flushed)
	s.lastBatch = batchID
	cctx := workflow.WithChildOptions(ctx, workflow.ChildWorkflowOptions{
		WorkflowID:        models.BatchWorkflowID(batchID),
		TaskQueue:         workflow.GetInfo(ctx).TaskQueueName,
		ParentClosePolicy: enumspb.PARENT_CLOSE_POLICY_ABANDON,
		Priority:          temporal.Priority{PriorityKey: priority},
		TypedSearchAttributes: temporal.NewSearchAttributes(
			attrBatchID.ValueSet(batchID), attrChannel.ValueSet(s.in.Channel), attrPriority.ValueSet(int64(priority))),
	})
	fut := workflow.ExecuteChildWorkflow(cctx, BatchSync, models.BatchSyncInput{
		BatchID: batchID, Mutations: take, Retry: models.DefaultRetryPolicy(),
	})
	s.running = append(s.running, priority)
	workflow.Go(ctx, func(ctx workflow.Context) {
		defer s.done(priority)
		var st models.BatchStatus
		if err := fut.Get(ctx, &st); err != nil {
			// The batch's own outcomes (rejections, dead letters) are in its result;
			// a failed BatchSync is an incident for the operator, not for the PMS.
			workflow.GetLogger(ctx).Error("smoothed batch failed", "batch", batchID, "error", err)
			return
		}
		t := st.Totals()
		s.totals.Add(t)
		workflow.GetLogger(ctx).Info("smoothed batch done", "batch", batchID, "mutations", len(take),
			"committed", t.Committed, "superseded", t.Superseded, "rejected", t.Rejected, "dead_lettered", t.DeadLettered)
	})
}

// done drops one running batch of the given priority.
func (s *smoother) done(priority int) {
	for i, p := range s.running {
		if p == priority {
			s.running = append(s.running[:i], s.running[i+1:]...)
			return
		}
	}
}
