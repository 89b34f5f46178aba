package workflows

import (
	"time"

	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/temporal"

	"github.com/paritysync/paritysync/models"
)

func (s *unitSuite) TestBatchSyncSignalRightBeforeContinueAsNewIsNotLost() {
	var chunks []models.Chunk
	for n := range 12 {
		chunks = append(chunks, chunk("expedia", 3, n, 1, 1))
	}
	plan := models.BatchPlan{BatchID: "b1", Mutations: 12, Chunks: chunks}
	s.env.OnActivity(models.ActivityPrepareBatch, mock.Anything, mock.Anything).Return(plan, nil).Once()
	s.env.OnActivity(models.ActivityPushRequest, mock.Anything, mock.Anything).Return(models.PushResult{Committed: 1}, nil).After(10 * time.Second)
	s.env.RegisterDelayedCallback(func() { s.env.SetContinueAsNewSuggested(true) }, 25*time.Second)
	// The pause lands in the workflow task that sees the last running children
	// finish, the one that continues as new.
	s.env.RegisterDelayedCallback(func() {
		s.env.SignalWorkflowSkippingWorkflowTask(models.SignalPauseChannel, models.PauseSignal{Channel: "expedia", Reason: "maintenance"})
	}, 30*time.Second)

	s.env.ExecuteWorkflow(BatchSync, models.BatchSyncInput{BatchID: "b1", Mutations: []models.Mutation{{ID: "m1"}},
		MaxRunningChildren: 2})

	var next models.BatchSyncInput
	s.continuedInput(&next)
	s.Require().NotNil(next.Carry)
	s.Equal(map[string]string{"expedia": "maintenance"}, next.Carry.Paused, "the pause travels into the next run")
}

func (s *unitSuite) TestChannelSyncSignalRightBeforeContinueAsNewIsNotLost() {
	s.env.OnActivity(models.ActivityPushRequest, mock.Anything, mock.Anything).Return(models.PushResult{Committed: 2}, nil).After(10 * time.Second)
	s.env.RegisterDelayedCallback(func() { s.env.SetCurrentHistoryLength(MaxHistory) }, 35*time.Second)
	// A lane delivers the request it took before the history filled up, so the last
	// push ends at 50 s; the pause lands in the workflow task of its result, the
	// one that continues as new.
	s.env.RegisterDelayedCallback(func() {
		s.env.SignalWorkflowSkippingWorkflowTask(models.SignalPauseChannel, models.PauseSignal{Channel: "agoda", Reason: "maintenance"})
	}, 50*time.Second)

	s.env.ExecuteWorkflow(ChannelSync, models.ChannelSyncInput{BatchID: "b1", Chunk: chunk("agoda", 3, 0, 20, 40), Window: 1})

	var next models.ChannelSyncInput
	s.continuedInput(&next)
	s.NotEmpty(next.Remaining)
	s.Equal("maintenance", next.Paused, "the pause travels into the next run")
}

func (s *unitSuite) TestCancelDuringPrepareBatchRecordsCancelledOutcomes() {
	plan := models.BatchPlan{BatchID: "b1", Mutations: 10, Chunks: []models.Chunk{chunk("expedia", 3, 0, 5, 10)}}
	// PrepareBatch is a minute in when the operator cancels: it ends and stores its
	// requests, and the batch then closes them as cancelled without pushing any.
	s.env.OnActivity(models.ActivityPrepareBatch, mock.Anything, mock.Anything).Return(plan, nil).After(time.Minute).Once()
	s.env.OnActivity(models.ActivityCancelBatch, mock.Anything, mock.MatchedBy(func(in models.CancelInput) bool {
		return in.BatchID == "b1"
	})).Return([]models.ChannelCounts{{Channel: "expedia", Total: 10, Cancelled: 10}}, nil).Once()
	s.env.RegisterDelayedCallback(s.env.CancelWorkflow, 10*time.Second)

	s.env.ExecuteWorkflow(BatchSync, models.BatchSyncInput{BatchID: "b1", Mutations: []models.Mutation{{ID: "m1"}}})

	var canceled *temporal.CanceledError
	s.Require().ErrorAs(s.env.GetWorkflowError(), &canceled)
	var st models.BatchStatus
	s.Require().NoError(canceled.Details(&st))
	s.True(st.Cancelled)
	t := st.Totals()
	s.Equal(10, t.Cancelled)
	s.Equal(t.Total, t.Done(), "every update has an outcome")
	s.env.AssertNotCalled(s.T(), "PushRequest", mock.Anything, mock.Anything)
}
