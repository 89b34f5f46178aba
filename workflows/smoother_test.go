package workflows

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/paritysync/paritysync/models"
)

func mutations(prefix string, n int) []models.Mutation {
	ms := make([]models.Mutation, n)
	for i := range ms {
		ms[i] = models.Mutation{ID: fmt.Sprintf("%s-%d", prefix, i), Channel: "expedia", Version: 1}
	}
	return ms
}

// bulk is mutations at bulk priority.
func bulk(prefix string, n int) []models.Mutation {
	ms := mutations(prefix, n)
	for i := range ms {
		ms[i].Priority = models.PriorityBulk
	}
	return ms
}

// stopSell is one stop-sell, urgent (priority 1) by default.
func stopSell(prefix string) []models.Mutation {
	ms := mutations(prefix, 1)
	stop := true
	ms[0].StopSell = &stop
	return ms
}

// batchesEndAfterAnHour mocks BatchSync to end an hour after it starts, and hands
// started when each batch started (after the test's start) and its input.
func (s *unitSuite) batchesEndAfterAnHour(started func(at time.Duration, in models.BatchSyncInput)) {
	begin := s.env.Now()
	s.env.OnWorkflow(BatchSync, mock.Anything, mock.Anything).Return(
		func(_ workflow.Context, in models.BatchSyncInput) (models.BatchStatus, error) {
			started(s.env.Now().Sub(begin)-time.Hour, in) // the mock answers at its end
			return models.BatchStatus{Done: true}, nil
		}).After(time.Hour)
}

// batchStarts mocks BatchSync as batchesEndAfterAnHour does and returns when each
// batch started.
func (s *unitSuite) batchStarts() *[]time.Duration {
	var at []time.Duration
	s.batchesEndAfterAnHour(func(t time.Duration, _ models.BatchSyncInput) { at = append(at, t) })
	return &at
}

// smootherStatus is the running smoother's answer to the status query.
func (s *unitSuite) smootherStatus() models.SmootherStatus {
	v, err := s.env.QueryWorkflow(models.QueryStatus)
	s.Require().NoError(err)
	var st models.SmootherStatus
	s.Require().NoError(v.Get(&st))
	return st
}

// claimCheck stands in for the store's smoother_changes in the unit tests (the
// store's own tests and the worker's end-to-end tests run the real one): staged
// submissions, the admitted changes in order, and the batches taken.
type claimCheck struct {
	mu      sync.Mutex // mocked activities run on goroutines of their own
	staged  map[string][]models.Mutation
	waiting []models.Mutation
	batches map[string][]models.Mutation
	closed  []string
}

// withClaimCheck mocks the smoother's activities over a claimCheck.
func (s *unitSuite) withClaimCheck() *claimCheck {
	c := &claimCheck{staged: map[string][]models.Mutation{}, batches: map[string][]models.Mutation{}}
	s.env.OnActivity(models.ActivityAdmitChanges, mock.Anything, mock.Anything).Return(
		func(_ context.Context, in models.AdmitInput) (models.Admitted, error) {
			c.mu.Lock()
			defer c.mu.Unlock()
			var got models.Admitted
			for _, m := range c.staged[in.Submission] {
				got.Changes[models.ClampPriority(m.EffectivePriority())]++
			}
			c.waiting = append(c.waiting, c.staged[in.Submission]...)
			delete(c.staged, in.Submission)
			return got, nil
		}).Maybe()
	s.env.OnActivity(models.ActivityWaitingChanges, mock.Anything, mock.Anything).Return(
		func(_ context.Context, _ string) (models.Admitted, error) {
			c.mu.Lock()
			defer c.mu.Unlock()
			var got models.Admitted
			for _, m := range c.waiting {
				got.Changes[models.ClampPriority(m.EffectivePriority())]++
			}
			return got, nil
		}).Maybe()
	s.env.OnActivity(models.ActivityTakeChanges, mock.Anything, mock.Anything).Return(
		func(_ context.Context, in models.TakeInput) (models.Taken, error) {
			c.mu.Lock()
			defer c.mu.Unlock()
			var taken models.Taken
			var keep []models.Mutation
			for _, m := range c.waiting {
				if p := models.ClampPriority(m.EffectivePriority()); p <= in.MaxPriority && len(c.batches[in.BatchID]) < in.Max {
					c.batches[in.BatchID] = append(c.batches[in.BatchID], m)
					taken.Changes[p]++
				} else {
					keep = append(keep, m)
				}
			}
			c.waiting = keep
			if taken.Changes.Total() > 0 {
				taken.PayloadKey = models.BatchWorkflowID(in.BatchID)
			}
			return taken, nil
		}).Maybe()
	s.env.OnActivity(models.ActivityCloseBatch, mock.Anything, mock.Anything).Return(
		func(_ context.Context, in models.CloseInput) (int, error) {
			c.mu.Lock()
			defer c.mu.Unlock()
			c.closed = append(c.closed, in.BatchID)
			return len(c.batches[in.BatchID]), nil
		}).Maybe()
	return c
}

// size is how many changes batch in carries by reference.
func (c *claimCheck) size(in models.BatchSyncInput) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.batches[in.BatchID])
}

// submitAt stages ms and sends a submit update for them at workflow time at; the
// callbacks record the answer.
func (s *unitSuite) submitAt(c *claimCheck, at time.Duration, ms []models.Mutation, rejected *error) {
	s.env.RegisterDelayedCallback(func() {
		sub := fmt.Sprintf("u-%s", at)
		c.mu.Lock()
		c.staged[sub] = ms
		c.mu.Unlock()
		s.env.UpdateWorkflow(models.UpdateSubmit, sub, &testsuite.TestUpdateCallback{
			OnReject:   func(err error) { *rejected = err },
			OnComplete: func(any, error) {},
		}, models.SubmitRef{Submission: sub, Changes: len(ms)})
	}, at)
}

// smoothedBatches records the inputs of the BatchSync children a smoother starts.
func (s *unitSuite) smoothedBatches() *[]models.BatchSyncInput {
	var got []models.BatchSyncInput
	s.env.OnWorkflow(BatchSync, mock.Anything, mock.Anything).Return(
		func(_ workflow.Context, in models.BatchSyncInput) (models.BatchStatus, error) {
			got = append(got, in)
			return models.BatchStatus{Done: true}, nil
		})
	return &got
}

func (s *unitSuite) TestSmootherDebouncesABurstIntoOneBatch() {
	c := s.withClaimCheck()
	batches := s.smoothedBatches()
	var rejected error
	s.submitAt(c, time.Second, mutations("a", 3), &rejected)
	s.submitAt(c, 2*time.Second, mutations("b", 3), &rejected)
	s.submitAt(c, 3500*time.Millisecond, mutations("c", 3), &rejected)
	s.submitAt(c, time.Minute, mutations("d", 2), &rejected)
	s.env.RegisterDelayedCallback(s.env.CancelWorkflow, 2*time.Minute)

	s.env.ExecuteWorkflow(BurstSmoother, models.SmootherInput{Channel: "expedia", Debounce: 2 * time.Second})

	s.NoError(rejected)
	s.Require().Len(*batches, 2, "one batch for the burst, one for the late submit")
	s.Equal(9, c.size((*batches)[0]))
	s.Equal(2, c.size((*batches)[1]))
	s.Empty((*batches)[0].Mutations, "a batch travels by reference")
	s.Equal(models.BatchWorkflowID((*batches)[0].BatchID), (*batches)[0].PayloadKey)
	s.Contains((*batches)[0].BatchID, "smoother-expedia-")
	s.NotEqual((*batches)[0].BatchID, (*batches)[1].BatchID)
}

func (s *unitSuite) TestSmootherSplitsAtMaxBatch() {
	c := s.withClaimCheck()
	batches := s.smoothedBatches()
	var rejected error
	s.submitAt(c, time.Second, mutations("a", 7), &rejected)
	s.env.RegisterDelayedCallback(s.env.CancelWorkflow, time.Minute)

	s.env.ExecuteWorkflow(BurstSmoother, models.SmootherInput{Channel: "expedia", MaxBatch: 3})

	s.NoError(rejected)
	var sizes []int
	for _, b := range *batches {
		sizes = append(sizes, c.size(b))
	}
	s.Equal([]int{3, 3, 1}, sizes)
}

func (s *unitSuite) TestSmootherRefusesSubmitsOverItsAdmissionLimit() {
	c := s.withClaimCheck()
	// The batch takes an hour, so submits pile up behind it.
	s.env.OnWorkflow(BatchSync, mock.Anything, mock.Anything).Return(models.BatchStatus{Done: true}, nil).After(time.Hour)
	var first, second, third error
	s.submitAt(c, time.Second, mutations("a", 4), &first)
	s.submitAt(c, 10*time.Second, mutations("b", 4), &second)
	s.submitAt(c, 20*time.Second, mutations("c", 3), &third)
	s.env.RegisterDelayedCallback(func() {
		st := s.smootherStatus()
		s.Equal(4, st.Pending, "the refused submit left nothing behind")
		s.env.CancelWorkflow()
	}, 30*time.Second)

	s.env.ExecuteWorkflow(BurstSmoother, models.SmootherInput{Channel: "expedia", MaxPending: 6})

	s.NoError(first)
	s.NoError(second, "the first four were flushed into the running batch")
	s.Require().Error(third)
	s.Contains(third.Error(), "full")
	var ae *temporal.ApplicationError
	s.Require().ErrorAs(third, &ae, "a refusal is typed, so the CLI tells it from an error")
	s.Equal(models.ErrSmootherFull, ae.Type())
}

func (s *unitSuite) TestSmootherContinuesAsNewWithWhatIsWaiting() {
	c := s.withClaimCheck()
	var batches []models.BatchSyncInput
	s.env.OnWorkflow(BatchSync, mock.Anything, mock.Anything).Return(
		func(_ workflow.Context, in models.BatchSyncInput) (models.BatchStatus, error) {
			batches = append(batches, in)
			return models.BatchStatus{Done: true}, nil
		}).After(10 * time.Second)
	var rejected error
	s.submitAt(c, time.Second, mutations("a", 5), &rejected)
	// The server suggests continuing while the first batch runs.
	s.env.RegisterDelayedCallback(func() { s.env.SetContinueAsNewSuggested(true) }, 5*time.Second)

	s.env.ExecuteWorkflow(BurstSmoother, models.SmootherInput{Channel: "expedia", MaxBatch: 2})

	var next models.SmootherInput
	s.continuedInput(&next)
	s.Len(batches, 1)
	s.Equal(3, next.Waiting.Total(), "what was not flushed travels on, as counts")
	s.Len(c.waiting, 3, "in the claim check")
	s.Equal(1, next.Flushed)
	s.Equal(2, next.MaxBatch)
}

func (s *unitSuite) TestSmootherStartsAnUrgentChangeBesideARunningBulkBatch() {
	c := s.withClaimCheck()
	type started struct {
		at        time.Duration
		mutations int
	}
	var got []started
	// A bulk batch saturates the channel for an hour.
	s.batchesEndAfterAnHour(func(at time.Duration, in models.BatchSyncInput) {
		got = append(got, started{at, c.size(in)})
	})
	var rejected error
	s.submitAt(c, time.Second, bulk("bulk", 60), &rejected)
	s.submitAt(c, 10*time.Second, stopSell("stop"), &rejected)
	s.submitAt(c, 20*time.Second, bulk("more", 5), &rejected)
	s.env.RegisterDelayedCallback(func() {
		st := s.smootherStatus()
		s.Equal(2, st.Running, "the urgent batch runs beside the bulk one")
		s.Equal(5, st.Pending, "more bulk waits for the bulk batch: back-pressure stays")
	}, 30*time.Minute)
	s.env.RegisterDelayedCallback(s.env.CancelWorkflow, 5*time.Hour)

	s.env.ExecuteWorkflow(BurstSmoother, models.SmootherInput{Channel: "expedia"})

	s.NoError(rejected)
	s.Require().Len(got, 3)
	s.Equal(started{time.Second + models.DefaultDebounce, 60}, got[0])
	s.Equal(started{10*time.Second + models.UrgentDebounce, 1}, got[1],
		"the stop-sell starts after the urgent debounce, beside the running bulk batch")
	s.Equal(5, got[2].mutations)
	s.GreaterOrEqual(got[2].at, got[0].at+time.Hour, "the next bulk batch waited for the first")
}

func (s *unitSuite) TestSmootherStartsDefaultWorkBesideBulkAfterTheUsualDebounce() {
	c := s.withClaimCheck()
	at := s.batchStarts()
	var rejected error
	s.submitAt(c, time.Second, bulk("bulk", 10), &rejected)
	s.submitAt(c, 10*time.Second, mutations("rate", 2), &rejected) // priority 3
	s.env.RegisterDelayedCallback(s.env.CancelWorkflow, 3*time.Hour)

	s.env.ExecuteWorkflow(BurstSmoother, models.SmootherInput{Channel: "expedia"})

	s.NoError(rejected)
	s.Equal([]time.Duration{time.Second + models.DefaultDebounce, 10*time.Second + models.DefaultDebounce}, *at)
}

func (s *unitSuite) TestSmootherAboutToContinueAsNewStillStartsUrgentWork() {
	c := s.withClaimCheck()
	at := s.batchStarts()
	var rejected error
	s.submitAt(c, time.Second, bulk("bulk", 10), &rejected)
	s.env.RegisterDelayedCallback(func() { s.env.SetContinueAsNewSuggested(true) }, 5*time.Second)
	s.submitAt(c, 10*time.Second, stopSell("stop"), &rejected)

	s.env.ExecuteWorkflow(BurstSmoother, models.SmootherInput{Channel: "expedia"})

	var next models.SmootherInput
	s.continuedInput(&next)
	s.NoError(rejected)
	s.Equal([]time.Duration{time.Second + models.DefaultDebounce, 10*time.Second + models.UrgentDebounce}, *at,
		"the stop-sell did not wait for the continuation")
	s.Zero(next.Waiting.Total())
	s.Equal(2, next.Flushed)
}

func (s *unitSuite) TestSmootherClosesTheOutcomesOfABatchThatFailed() {
	c := s.withClaimCheck()
	s.env.OnWorkflow(BatchSync, mock.Anything, mock.Anything).Return(models.BatchStatus{},
		temporal.NewApplicationError("prepare batch: database gone", "Boom")).Once()
	var rejected error
	s.submitAt(c, time.Second, mutations("a", 3), &rejected)
	s.env.RegisterDelayedCallback(func() {
		st := s.smootherStatus()
		s.Zero(st.Running)
		s.Equal(3, st.Totals.Cancelled, "the failed batch's changes are closed as cancelled")
		s.env.CancelWorkflow()
	}, time.Minute)

	s.env.ExecuteWorkflow(BurstSmoother, models.SmootherInput{Channel: "expedia"})

	s.NoError(rejected)
	s.Require().Len(c.closed, 1)
	s.Contains(c.closed[0], "smoother-expedia-")
}

func (s *unitSuite) TestSmootherStartedAfreshTakesOnWhatItsPredecessorAdmitted() {
	c := s.withClaimCheck()
	batches := s.smoothedBatches()
	c.waiting = mutations("orphan", 4) // admitted by a smoother since terminated
	s.env.RegisterDelayedCallback(s.env.CancelWorkflow, time.Minute)

	s.env.ExecuteWorkflow(BurstSmoother, models.SmootherInput{Channel: "expedia"})

	s.Require().Len(*batches, 1)
	s.Equal(4, c.size((*batches)[0]))
}

func (s *unitSuite) TestSmootherStartedAfreshCountsEachChangeOnce() {
	c := s.withClaimCheck()
	batches := s.smoothedBatches()
	c.waiting = mutations("orphan", 2)
	var rejected error
	s.submitAt(c, 0, mutations("a", 3), &rejected) // with the start, as UpdateWithStart does
	s.env.RegisterDelayedCallback(func() {
		st := s.smootherStatus()
		s.Zero(st.Pending, "nothing counted twice")
		s.env.CancelWorkflow()
	}, time.Minute)

	s.env.ExecuteWorkflow(BurstSmoother, models.SmootherInput{Channel: "expedia"})

	s.NoError(rejected)
	s.Require().Len(*batches, 1)
	s.Equal(5, c.size((*batches)[0]))
}

func (s *unitSuite) TestSmootherPastItsHistoryLimitRefusesSubmitsUntilItContinues() {
	c := s.withClaimCheck()
	// The batch takes an hour, so the run cannot continue as new meanwhile.
	s.env.OnWorkflow(BatchSync, mock.Anything, mock.Anything).Return(models.BatchStatus{Done: true}, nil).After(time.Hour)
	var first, second error
	s.submitAt(c, time.Second, mutations("a", 2), &first)
	s.env.RegisterDelayedCallback(func() { s.env.SetCurrentHistorySize(SmootherHistoryLimit) }, 10*time.Second)
	s.submitAt(c, 20*time.Second, mutations("b", 2), &second)

	s.env.ExecuteWorkflow(BurstSmoother, models.SmootherInput{Channel: "expedia"})

	s.NoError(first)
	var ae *temporal.ApplicationError
	s.Require().ErrorAs(second, &ae, "refused, so the history stops growing")
	s.Equal(models.ErrSmootherFull, ae.Type())
	var next models.SmootherInput
	s.continuedInput(&next)
	s.Equal(1, next.Flushed, "continued as new once the batch ended")
}

func (s *unitSuite) TestSmootherContinuesAsNewAtItsHistoryBytes() {
	c := s.withClaimCheck()
	var batches int
	s.env.OnWorkflow(BatchSync, mock.Anything, mock.Anything).Return(
		func(workflow.Context, models.BatchSyncInput) (models.BatchStatus, error) {
			batches++
			return models.BatchStatus{Done: true}, nil
		}).After(time.Hour)
	var rejected error
	s.submitAt(c, time.Second, mutations("a", 2), &rejected)
	s.env.RegisterDelayedCallback(func() { s.env.SetCurrentHistorySize(SmootherHistoryBytes) }, 10*time.Second)
	s.submitAt(c, 20*time.Second, mutations("b", 2), &rejected)

	s.env.ExecuteWorkflow(BurstSmoother, models.SmootherInput{Channel: "expedia"})

	s.NoError(rejected, "below the limit, submits still land")
	var next models.SmootherInput
	s.continuedInput(&next)
	s.Equal(1, batches)
	s.Equal(2, next.Waiting.Total(), "what waits behind the batch travels on, as counts")
}
