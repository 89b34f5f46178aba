package workflows

import (
	"errors"
	"fmt"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/paritysync/paritysync/models"
)

// BurstSmoother is a long-lived entity per channel (smoother/<channel>) that turns a
// storm of small PMS submissions into few batches: it takes changes by update,
// refuses them when too many are waiting (admission control, so the PMS retries
// later instead of the channel's quota collapsing), waits for the burst to calm
// (debounce), and runs what gathered as a BatchSync. A batch starts when none
// runs, or beside the running ones for work more urgent than all of them: an
// urgent change never waits for a bulk batch, and the batches running at once are
// bounded by the priority levels (back-pressure).
//
// It holds references, not payloads: a submit names changes staged in the claim
// check (models.SubmitRef), AdmitChanges admits them there, TakeChanges moves a
// batch's share into the batch's payload, and the run keeps counts per priority.
// Every input, update, activity and child payload is a few hundred bytes, whatever
// the admission limit. A batch that ends without closing its outcomes (failed,
// terminated, timed out) is closed by CloseBatch: every accepted change ends with
// exactly one outcome.
func BurstSmoother(ctx workflow.Context, in models.SmootherInput) error {
	s := &smoother{in: withSmootherDefaults(in), waiting: in.Waiting, flushed: in.Flushed,
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
	if in.MaxHistory <= 0 || in.MaxHistory > MaxHistory {
		in.MaxHistory = MaxHistory
	}
	return in
}

// A smoother's run continues as new once its history reaches SmootherHistoryBytes
// (or its MaxHistory events) and no batch runs. While batches keep it from
// continuing, submits still land; past SmootherHistoryLimit it refuses them
// (SmootherFull), so a run's history stays under a megabyte whatever comes.
const (
	SmootherHistoryBytes = 384 << 10
	SmootherHistoryLimit = 768 << 10
)

type smoother struct {
	in models.SmootherInput
	// waiting counts the admitted changes in the claim check by priority;
	// admitting those of submits accepted whose admission still runs.
	waiting   models.PriorityCounts
	admitting int
	// busy is set while an admission or a take runs: one at a time, so what
	// waiting counts is what a take finds. counted is set once a fresh run
	// counted what a predecessor left (recount): no admission runs before.
	busy      bool
	counted   bool
	flushed   int
	submits   int
	lastBatch string
	totals    models.ChannelCounts
	// running holds the most urgent priority of each batch still running.
	running []int
}

var errEmptySubmit = errors.New("submit: no changes")

func (s *smoother) run(ctx workflow.Context) error {
	fresh := workflow.GetInfo(ctx).ContinuedExecutionRunID == ""
	s.counted = !fresh
	if err := workflow.SetQueryHandler(ctx, models.QueryStatus, func() (models.SmootherStatus, error) {
		return models.SmootherStatus{Channel: s.in.Channel, Pending: s.waiting.Total() + s.admitting,
			MaxPending: s.in.MaxPending, Flushed: s.flushed, Running: len(s.running),
			LastBatch: s.lastBatch, Totals: s.totals}, nil
	}); err != nil {
		return fmt.Errorf("status query: %w", err)
	}
	if err := workflow.SetUpdateHandlerWithOptions(ctx, models.UpdateSubmit, s.admit,
		workflow.UpdateHandlerOptions{Validator: func(ctx workflow.Context, ref models.SubmitRef) error {
			if ref.Changes <= 0 || ref.Submission == "" {
				return errEmptySubmit
			}
			// A validator must not change state: refused submits leave no history.
			if n := s.waiting.Total() + s.admitting; n+ref.Changes > s.in.MaxPending {
				return temporal.NewApplicationError(fmt.Sprintf("smoother %s is full (%d waiting, at most %d): retry later",
					s.in.Channel, n, s.in.MaxPending), models.ErrSmootherFull)
			}
			if workflow.GetInfo(ctx).GetCurrentHistorySize() >= SmootherHistoryLimit {
				return temporal.NewApplicationError(fmt.Sprintf("smoother %s is continuing as new once its running batches end: retry later",
					s.in.Channel), models.ErrSmootherFull)
			}
			return nil
		}},
	); err != nil {
		return fmt.Errorf("submit update: %w", err)
	}

	if fresh {
		s.recount(ctx)
	}
	for {
		// A full history waits for the running batches to report, so the next run
		// starts with none: its back-pressure knows what runs. Meanwhile work more
		// urgent than them still starts.
		canContinue := func() bool { return s.historyFull(ctx) && len(s.running) == 0 }
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
		next.Waiting, next.Flushed = s.waiting, s.flushed
		return workflow.NewContinueAsNewError(ctx, BurstSmoother, next)
	}
}

// recount starts a fresh smoother (not a continuation) with the changes a
// predecessor admitted and never took (it was terminated, say), so none is left
// without an outcome.
func (s *smoother) recount(ctx workflow.Context) {
	defer func() { s.counted = true }()
	var got models.Admitted
	actx := withActivity(ctx, 30*time.Second, models.PriorityUrgent)
	if err := workflow.ExecuteActivity(actx, models.ActivityWaitingChanges, s.in.Channel).Get(ctx, &got); err != nil {
		// A later take finds them all the same: it takes up to MaxBatch.
		workflow.GetLogger(ctx).Error("count waiting changes", "error", err)
		return
	}
	for p, n := range got.Changes {
		s.waiting[p] += n
	}
}

// historyFull reports whether the run should continue as new: by its events, or by
// its bytes.
func (s *smoother) historyFull(ctx workflow.Context) bool {
	info := workflow.GetInfo(ctx)
	return historyFull(ctx) || info.GetCurrentHistoryLength() >= s.in.MaxHistory ||
		info.GetCurrentHistorySize() >= SmootherHistoryBytes
}

// admit is the submit update: it admits the staged submission in the claim check,
// one admission or take at a time, and counts what it took.
func (s *smoother) admit(ctx workflow.Context, ref models.SubmitRef) (models.SubmitResult, error) {
	s.admitting += ref.Changes
	defer func() { s.admitting -= ref.Changes }()
	if err := workflow.Await(ctx, func() bool { return s.counted && !s.busy }); err != nil {
		return models.SubmitResult{}, err
	}
	s.busy = true
	defer func() { s.busy = false }()
	var got models.Admitted
	actx := withActivity(ctx, 30*time.Second, models.PriorityUrgent)
	if err := workflow.ExecuteActivity(actx, models.ActivityAdmitChanges, models.AdmitInput{Channel: s.in.Channel,
		Submission: ref.Submission}).Get(ctx, &got); err != nil {
		return models.SubmitResult{}, fmt.Errorf("admit %s: %w", ref.Submission, err)
	}
	for p, n := range got.Changes {
		s.waiting[p] += n
	}
	s.submits++
	return models.SubmitResult{Accepted: got.Changes.Total(), Pending: s.waiting.Total() + s.admitting - ref.Changes}, nil
}

// eligible is how many of the waiting changes may start a batch now: all of them
// when no batch runs, else those more urgent than every running batch.
func (s *smoother) eligible() int {
	return s.waiting.Through(s.mostAllowed())
}

// mostAllowed is the least urgent priority that may start a batch now: one more
// urgent than every running batch.
func (s *smoother) mostAllowed() int {
	p := models.PriorityBulk
	for _, r := range s.running {
		p = min(p, r-1)
	}
	return p
}

// cut is the next batch's share of the waiting changes: the urgent ones alone when
// some are eligible, so they go with the short debounce, else every eligible one;
// in arrival order, at most MaxBatch. It returns the least urgent priority taken
// and how many.
func (s *smoother) cut() (through, n int, urgent bool) {
	through = s.mostAllowed()
	if s.waiting.Through(min(through, models.PriorityUrgent)) > 0 {
		through, urgent = models.PriorityUrgent, true
	}
	return through, min(s.waiting.Through(through), s.in.MaxBatch), urgent
}

// debounce waits until no submit arrived for the debounce time (UrgentDebounce at
// most when urgent work waits) or a full batch is waiting.
func (s *smoother) debounce(ctx workflow.Context) {
	for {
		_, n, urgent := s.cut()
		if n >= s.in.MaxBatch {
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

// flush takes the next batch's share (cut) out of the claim check and starts it as
// a BatchSync child by reference, and returns at once; the child's result is
// counted when it ends, and a child that ends without closing its outcomes is
// closed (CloseBatch).
func (s *smoother) flush(ctx workflow.Context) {
	if err := workflow.Await(ctx, func() bool { return !s.busy }); err != nil {
		return
	}
	through, n, _ := s.cut()
	if n == 0 {
		return
	}
	s.flushed++
	batchID := fmt.Sprintf("smoother-%s-%s-%d", s.in.Channel, workflow.Now(ctx).UTC().Format("20060102T150405"), s.flushed)
	s.busy = true
	var taken models.Taken
	actx := withActivity(ctx, time.Minute, models.PriorityUrgent)
	err := workflow.ExecuteActivity(actx, models.ActivityTakeChanges, models.TakeInput{Channel: s.in.Channel, BatchID: batchID,
		MaxPriority: through, Max: s.in.MaxBatch}).Get(ctx, &taken)
	s.busy = false
	if err != nil {
		// The claim check is unreachable (past the activity's retries): the changes
		// wait there, and the next flush tries again after a pause.
		workflow.GetLogger(ctx).Error("take changes", "batch", batchID, "error", err)
		_ = workflow.Sleep(ctx, time.Minute)
		return
	}
	got := taken.Changes.Total()
	for p := models.PriorityUrgent; p <= through; p++ {
		if got < n {
			// Fewer than counted: none is left at these priorities.
			s.waiting[p] = 0
		} else {
			s.waiting[p] -= min(taken.Changes[p], s.waiting[p])
		}
	}
	if got == 0 {
		return
	}
	priority := taken.Changes.MostUrgent()
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
		BatchID: batchID, PayloadKey: taken.PayloadKey, Retry: models.DefaultRetryPolicy(),
	})
	s.running = append(s.running, priority)
	workflow.Go(ctx, func(ctx workflow.Context) {
		defer s.done(priority)
		var st models.BatchStatus
		if err := fut.Get(ctx, &st); err != nil {
			// The batch ended without closing its outcomes (or closed them itself,
			// if cancelled): what is still open is closed here, so every accepted
			// change ends with one outcome; the failure is the operator's incident.
			workflow.GetLogger(ctx).Error("smoothed batch failed", "batch", batchID, "error", err)
			s.close(ctx, batchID, err)
			return
		}
		t := st.Totals()
		s.totals.Add(t)
		workflow.GetLogger(ctx).Info("smoothed batch done", "batch", batchID, "mutations", got,
			"committed", t.Committed, "superseded", t.Superseded, "rejected", t.Rejected, "dead_lettered", t.DeadLettered)
	})
}

// close runs CloseBatch for a batch that ended with err.
func (s *smoother) close(ctx workflow.Context, batchID string, err error) {
	actx := withActivity(ctx, time.Minute, models.PriorityUrgent)
	var closed int
	ended := "failed"
	switch {
	case temporal.IsTerminatedError(err):
		ended = "was terminated"
	case temporal.IsTimeoutError(err):
		ended = "timed out"
	case temporal.IsCanceledError(err):
		ended = "was cancelled"
	}
	reason := fmt.Sprintf("batch %s %s before this update had an outcome", batchID, ended)
	if err := workflow.ExecuteActivity(actx, models.ActivityCloseBatch, models.CloseInput{BatchID: batchID, Reason: reason}).
		Get(ctx, &closed); err != nil {
		workflow.GetLogger(ctx).Error("close a failed batch's outcomes", "batch", batchID, "error", err)
		return
	}
	s.totals.Cancelled += closed
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
