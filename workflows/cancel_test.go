package workflows

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/temporal"

	"github.com/paritysync/paritysync/activities"
	"github.com/paritysync/paritysync/models"
)

func (s *unitSuite) TestCancelledBatchClosesEveryOutcome() {
	plan := models.BatchPlan{BatchID: "b1", Mutations: 20, Chunks: []models.Chunk{
		chunk("booking_com", 3, 0, 5, 10), chunk("expedia", 3, 0, 5, 10)}}
	s.env.OnActivity(models.ActivityPrepareBatch, mock.Anything, mock.Anything).Return(plan, nil).Once()
	var pushes atomic.Int32 // mocked activities run on goroutines of their own
	s.env.OnActivity(models.ActivityPushRequest, mock.Anything, mock.Anything).Return(
		func(context.Context, models.PushInput) (models.PushResult, error) {
			pushes.Add(1)
			return models.PushResult{Committed: 2}, nil
		}).After(20 * time.Second)
	var closed []string
	s.env.OnActivity(models.ActivityCancelBatch, mock.Anything, mock.Anything).Return(
		func(_ context.Context, in models.CancelInput) ([]models.ChannelCounts, error) {
			closed = append(closed, in.BatchID)
			// What the store holds: the pushes that ended, the rest cancelled.
			n := int(pushes.Load())
			return []models.ChannelCounts{
				{Channel: "booking_com", Total: 10, Committed: n, Cancelled: 10 - n},
				{Channel: "expedia", Total: 10, Cancelled: 10},
			}, nil
		}).Once()
	s.env.RegisterDelayedCallback(s.env.CancelWorkflow, 30*time.Second)

	s.env.ExecuteWorkflow(BatchSync, models.BatchSyncInput{BatchID: "b1", Window: 1})

	err := s.env.GetWorkflowError()
	var canceled *temporal.CanceledError
	s.Require().ErrorAs(err, &canceled)
	var st models.BatchStatus
	s.Require().True(canceled.HasDetails())
	s.Require().NoError(canceled.Details(&st))
	s.Equal([]string{"b1"}, closed, "the outcomes are closed once")
	s.True(st.Cancelled)
	t := st.Totals()
	s.Equal(20, t.Total)
	s.Equal(t.Total, t.Done(), "every update is accounted for")
	s.Positive(t.Cancelled)
	s.Empty(s.released, "a cancelled batch keeps its payload for the record")
}

func quotaSpent(wait time.Duration) error {
	return activities.FailureError(models.ErrQuotaExhausted, models.Failure{Wait: wait, Status: 400,
		Message: "quota_exhausted"})
}

func (s *unitSuite) TestQuotaExhaustedWaitsForTheResetThenCommits() {
	s.env.OnActivity(models.ActivityPushRequest, mock.Anything, mock.Anything).Return(models.PushResult{}, quotaSpent(3*time.Hour)).Once()
	s.env.OnActivity(models.ActivityPushRequest, mock.Anything, mock.Anything).Return(models.PushResult{Committed: 2}, nil).Once()

	counts := s.runChannelSync(chunk("booking_com", 3, 0, 1, 2))

	s.Equal([]time.Duration{3 * time.Hour}, s.timers, "one durable timer until the reset")
	s.Equal(2, counts.Committed)
	s.Zero(counts.DeadLettered)
}

func (s *unitSuite) TestQuotaStillSpentAfterTheResetsIsParked() {
	s.env.OnActivity(models.ActivityPushRequest, mock.Anything, mock.Anything).Return(models.PushResult{}, quotaSpent(time.Hour)).
		Times(MaxQuotaWaits + 1)
	s.env.OnActivity(models.ActivityRecordDeadLetter, mock.Anything, mock.MatchedBy(func(in models.DeadLetterInput) bool {
		return in.Reason == models.ReasonQuotaExhausted
	})).Return(models.DeadLetterResult{Updates: 2}, nil).Once()

	counts := s.runChannelSync(chunk("booking_com", 3, 0, 1, 2))

	s.Len(s.timers, MaxQuotaWaits)
	s.Equal(2, counts.DeadLettered)
}
