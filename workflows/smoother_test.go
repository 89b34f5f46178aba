package workflows

import (
	"fmt"
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

// submitAt sends a submit update at workflow time at; the callbacks record the answer.
func (s *unitSuite) submitAt(at time.Duration, ms []models.Mutation, rejected *error) {
	s.env.RegisterDelayedCallback(func() {
		s.env.UpdateWorkflow(models.UpdateSubmit, fmt.Sprintf("u-%s", at), &testsuite.TestUpdateCallback{
			OnReject:   func(err error) { *rejected = err },
			OnComplete: func(any, error) {},
		}, ms)
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
	batches := s.smoothedBatches()
	var rejected error
	s.submitAt(time.Second, mutations("a", 3), &rejected)
	s.submitAt(2*time.Second, mutations("b", 3), &rejected)
	s.submitAt(3500*time.Millisecond, mutations("c", 3), &rejected)
	s.submitAt(time.Minute, mutations("d", 2), &rejected)
	s.env.RegisterDelayedCallback(s.env.CancelWorkflow, 2*time.Minute)

	s.env.ExecuteWorkflow(BurstSmoother, models.SmootherInput{Channel: "expedia", Debounce: 2 * time.Second})

	s.NoError(rejected)
	s.Require().Len(*batches, 2, "one batch for the burst, one for the late submit")
	s.Len((*batches)[0].Mutations, 9)
	s.Len((*batches)[1].Mutations, 2)
	s.Contains((*batches)[0].BatchID, "smoother-expedia-")
	s.NotEqual((*batches)[0].BatchID, (*batches)[1].BatchID)
}

func (s *unitSuite) TestSmootherSplitsAtMaxBatch() {
	batches := s.smoothedBatches()
	var rejected error
	s.submitAt(time.Second, mutations("a", 7), &rejected)
	s.env.RegisterDelayedCallback(s.env.CancelWorkflow, time.Minute)

	s.env.ExecuteWorkflow(BurstSmoother, models.SmootherInput{Channel: "expedia", MaxBatch: 3})

	s.NoError(rejected)
	var sizes []int
	for _, b := range *batches {
		sizes = append(sizes, len(b.Mutations))
	}
	s.Equal([]int{3, 3, 1}, sizes)
}

func (s *unitSuite) TestSmootherRefusesSubmitsOverItsAdmissionLimit() {
	// The batch takes an hour, so submits pile up behind it.
	s.env.OnWorkflow(BatchSync, mock.Anything, mock.Anything).Return(models.BatchStatus{Done: true}, nil).After(time.Hour)
	var first, second, third error
	s.submitAt(time.Second, mutations("a", 4), &first)
	s.submitAt(10*time.Second, mutations("b", 4), &second)
	s.submitAt(20*time.Second, mutations("c", 3), &third)
	s.env.RegisterDelayedCallback(func() {
		v, err := s.env.QueryWorkflow(models.QueryStatus)
		s.Require().NoError(err)
		var st models.SmootherStatus
		s.Require().NoError(v.Get(&st))
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
	var batches []models.BatchSyncInput
	s.env.OnWorkflow(BatchSync, mock.Anything, mock.Anything).Return(
		func(_ workflow.Context, in models.BatchSyncInput) (models.BatchStatus, error) {
			batches = append(batches, in)
			return models.BatchStatus{Done: true}, nil
		}).After(10 * time.Second)
	var rejected error
	s.submitAt(time.Second, mutations("a", 5), &rejected)
	// The server suggests continuing while the first batch runs.
	s.env.RegisterDelayedCallback(func() { s.env.SetContinueAsNewSuggested(true) }, 5*time.Second)

	s.env.ExecuteWorkflow(BurstSmoother, models.SmootherInput{Channel: "expedia", MaxBatch: 2})

	var next models.SmootherInput
	s.continuedInput(&next)
	s.Len(batches, 1)
	s.Len(next.Pending, 3, "what was not flushed travels on")
	s.Equal(1, next.Flushed)
	s.Equal(2, next.MaxBatch)
}

func (s *unitSuite) TestSmootherStartsAnUrgentChangeBesideARunningBulkBatch() {
	type started struct {
		at        time.Duration
		mutations int
	}
	var got []started
	begin := s.env.Now()
	// A bulk batch saturates the channel for an hour.
	s.env.OnWorkflow(BatchSync, mock.Anything, mock.Anything).Return(
		func(_ workflow.Context, in models.BatchSyncInput) (models.BatchStatus, error) {
			// The mock answers at its end, an hour after the batch started.
			got = append(got, started{s.env.Now().Sub(begin) - time.Hour, len(in.Mutations)})
			return models.BatchStatus{Done: true}, nil
		}).After(time.Hour)
	bulk := mutations("bulk", 60)
	for i := range bulk {
		bulk[i].Priority = models.PriorityBulk
	}
	stop := mutations("stop", 1)
	stopSell := true
	stop[0].StopSell = &stopSell // priority 1 by default
	more := mutations("more", 5)
	for i := range more {
		more[i].Priority = models.PriorityBulk
	}
	var rejected error
	s.submitAt(time.Second, bulk, &rejected)
	s.submitAt(10*time.Second, stop, &rejected)
	s.submitAt(20*time.Second, more, &rejected)
	s.env.RegisterDelayedCallback(func() {
		v, err := s.env.QueryWorkflow(models.QueryStatus)
		s.Require().NoError(err)
		var st models.SmootherStatus
		s.Require().NoError(v.Get(&st))
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
	var at []time.Duration
	begin := s.env.Now()
	s.env.OnWorkflow(BatchSync, mock.Anything, mock.Anything).Return(
		func(_ workflow.Context, in models.BatchSyncInput) (models.BatchStatus, error) {
			at = append(at, s.env.Now().Sub(begin)-time.Hour) // answered at its end
			return models.BatchStatus{Done: true}, nil
		}).After(time.Hour)
	bulk := mutations("bulk", 10)
	for i := range bulk {
		bulk[i].Priority = models.PriorityBulk
	}
	var rejected error
	s.submitAt(time.Second, bulk, &rejected)
	s.submitAt(10*time.Second, mutations("rate", 2), &rejected) // priority 3
	s.env.RegisterDelayedCallback(s.env.CancelWorkflow, 3*time.Hour)

	s.env.ExecuteWorkflow(BurstSmoother, models.SmootherInput{Channel: "expedia"})

	s.NoError(rejected)
	s.Equal([]time.Duration{time.Second + models.DefaultDebounce, 10*time.Second + models.DefaultDebounce}, at)
}

func (s *unitSuite) TestSmootherAboutToContinueAsNewStillStartsUrgentWork() {
	var at []time.Duration
	begin := s.env.Now()
	s.env.OnWorkflow(BatchSync, mock.Anything, mock.Anything).Return(
		func(_ workflow.Context, in models.BatchSyncInput) (models.BatchStatus, error) {
			at = append(at, s.env.Now().Sub(begin)-time.Hour) // answered at its end
			return models.BatchStatus{Done: true}, nil
		}).After(time.Hour)
	bulk := mutations("bulk", 10)
	for i := range bulk {
		bulk[i].Priority = models.PriorityBulk
	}
	stop := mutations("stop", 1)
	stopSell := true
	stop[0].StopSell = &stopSell
	var rejected error
	s.submitAt(time.Second, bulk, &rejected)
	s.env.RegisterDelayedCallback(func() { s.env.SetContinueAsNewSuggested(true) }, 5*time.Second)
	s.submitAt(10*time.Second, stop, &rejected)

	s.env.ExecuteWorkflow(BurstSmoother, models.SmootherInput{Channel: "expedia"})

	var next models.SmootherInput
	s.continuedInput(&next)
	s.NoError(rejected)
	s.Equal([]time.Duration{time.Second + models.DefaultDebounce, 10*time.Second + models.UrgentDebounce}, at,
		"the stop-sell did not wait for the continuation")
	s.Empty(next.Pending)
	s.Equal(2, next.Flushed)
}
