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
// (debounce), and runs what gathered as one BatchSync at a time.
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
}

var errEmptySubmit = errors.New("submit: no mutations")

func (s *smoother) run(ctx workflow.Context) error {
	if err := workflow.SetQueryHandler(ctx, models.QueryStatus, func() (models.SmootherStatus, error) {
		return models.SmootherStatus{Channel: s.in.Channel, Pending: len(s.pending),
			MaxPending: s.in.MaxPending, Flushed: s.flushed,
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
		if err := workflow.Await(ctx, func() bool { return len(s.pending) > 0 || historyFull(ctx) }); err != nil {
			return err
		}
		if len(s.pending) > 0 {
			s.debounce(ctx)
			s.flush(ctx)
		}
		if historyFull(ctx) {
			// Let submits in flight land in this run's state before handing it on.
			if err := workflow.Await(ctx, func() bool { return workflow.AllHandlersFinished(ctx) }); err != nil {
				return err
			}
			next := s.in
			next.Pending, next.Flushed = s.pending, s.flushed
			return workflow.NewContinueAsNewError(ctx, BurstSmoother, next)
		}
	}
}

// debounce waits until no submit arrived for the debounce time or a full batch is
// waiting.
func (s *smoother) debounce(ctx workflow.Context) {
	for len(s.pending) < s.in.MaxBatch {
		seen := s.submits
		more, err := workflow.AwaitWithTimeout(ctx, s.in.Debounce, func() bool {
			return s.submits != seen || len(s.pending) >= s.in.MaxBatch
		})
		if err != nil || !more {
			return
		}
	}
}

// flush runs up to MaxBatch waiting mutations as one BatchSync and waits for it:
// one batch at a time per channel is the smoother's back-pressure.
func (s *smoother) flush(ctx workflow.Context) {
	take := s.pending[:min(len(s.pending), s.in.MaxBatch)]
	s.pending = s.pending[len(take):]
	s.flushed++
	batchID := fmt.Sprintf("smoother-%s-%s-%d", s.in.Channel, workflow.Now(ctx).UTC().Format("20060102T150405"), s.flushed)
	s.lastBatch = batchID
	cctx := workflow.WithChildOptions(ctx, workflow.ChildWorkflowOptions{
		WorkflowID:        models.BatchWorkflowID(batchID),
		TaskQueue:         workflow.GetInfo(ctx).TaskQueueName,
		ParentClosePolicy: enumspb.PARENT_CLOSE_POLICY_ABANDON,
		TypedSearchAttributes: temporal.NewSearchAttributes(
			attrBatchID.ValueSet(batchID), attrChannel.ValueSet(s.in.Channel)),
	})
	var st models.BatchStatus
	err := workflow.ExecuteChildWorkflow(cctx, BatchSync, models.BatchSyncInput{
		BatchID: batchID, Mutations: take, Retry: models.DefaultRetryPolicy(),
	}).Get(ctx, &st)
	if err != nil {
		// The batch's own outcomes (rejections, dead letters) are in its result;
		// a failed BatchSync is an incident for the operator, not for the PMS.
		workflow.GetLogger(ctx).Error("smoothed batch failed", "batch", batchID, "error", err)
		return
	}
	t := st.Totals()
	s.totals.Add(t)
	workflow.GetLogger(ctx).Info("smoothed batch done", "batch", batchID, "mutations", len(take),
		"committed", t.Committed, "superseded", t.Superseded, "rejected", t.Rejected, "dead_lettered", t.DeadLettered)
}
