package workflows

import (
	"context"
	"time"

	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/temporal"

	"github.com/paritysync/paritysync/models"
)

// TestBatchRecordsItsEndOnceWithItsCallback: a batch that ends records its end
// once, done, with its counts and the callback URL it was started with.
func (s *unitSuite) TestBatchRecordsItsEndOnceWithItsCallback() {
	plan := models.BatchPlan{BatchID: "b1", Mutations: 3, Chunks: []models.Chunk{chunk("expedia", 3, 0, 1, 3)}}
	s.env.OnActivity(models.ActivityPrepareBatch, mock.Anything, mock.Anything).Return(plan, nil).Once()
	s.env.OnActivity(models.ActivityPushRequest, mock.Anything, mock.Anything).Return(models.PushResult{Committed: 3}, nil)

	s.env.ExecuteWorkflow(BatchSync, models.BatchSyncInput{BatchID: "b1", Window: 1, CallbackURL: "https://pms.example/hooks/b1"})

	s.Require().NoError(s.env.GetWorkflowError())
	s.Require().Len(s.finished, 1)
	f := s.finished[0]
	s.Equal("done", f.State)
	s.Equal("https://pms.example/hooks/b1", f.CallbackURL)
	s.Equal(3, models.BatchStatus{Channels: f.Channels}.Totals().Committed)
	s.False(f.EndedAt.IsZero())
}

// TestCancelledBatchRecordsItsEndAsCancelled: the cancel path records the end too.
func (s *unitSuite) TestCancelledBatchRecordsItsEndAsCancelled() {
	plan := models.BatchPlan{BatchID: "b1", Mutations: 10, Chunks: []models.Chunk{chunk("expedia", 3, 0, 5, 10)}}
	s.env.OnActivity(models.ActivityPrepareBatch, mock.Anything, mock.Anything).Return(plan, nil).Once()
	s.env.OnActivity(models.ActivityPushRequest, mock.Anything, mock.Anything).Return(models.PushResult{Committed: 2}, nil).After(20 * time.Second)
	s.env.OnActivity(models.ActivityCancelBatch, mock.Anything, mock.Anything).Return(
		func(context.Context, models.CancelInput) ([]models.ChannelCounts, error) {
			return []models.ChannelCounts{{Channel: "expedia", Total: 10, Cancelled: 10}}, nil
		}).Once()
	s.env.RegisterDelayedCallback(s.env.CancelWorkflow, 5*time.Second)

	s.env.ExecuteWorkflow(BatchSync, models.BatchSyncInput{BatchID: "b1", Window: 1})

	var canceled *temporal.CanceledError
	s.Require().ErrorAs(s.env.GetWorkflowError(), &canceled)
	s.Require().Len(s.finished, 1)
	s.Equal("cancelled", s.finished[0].State)
	s.Empty(s.finished[0].CallbackURL)
}
