package workflows

import (
	"time"

	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/workflow"

	"github.com/paritysync/paritysync/models"
)

// startedChildren records, for each ChannelSync child a batch starts, its chunk
// key, window and the workflow time it started; each child takes a minute.
type startedChild struct {
	key    string
	window int
	at     time.Duration
}

func (s *unitSuite) startedChildren() *[]startedChild {
	var got []startedChild
	start := s.env.Now()
	s.env.OnWorkflow(ChannelSync, mock.Anything, mock.Anything).Return(
		func(ctx workflow.Context, in models.ChannelSyncInput) (models.ChannelCounts, error) {
			got = append(got, startedChild{in.Chunk.Key, in.Window, workflow.Now(ctx).Sub(start)})
			_ = workflow.Sleep(ctx, time.Minute)
			return models.ChannelCounts{Channel: in.Chunk.Channel, Committed: in.Chunk.Updates}, nil
		})
	return &got
}

func (s *unitSuite) TestChildrenTakeTheChannelsInFlightBudget() {
	plan := models.BatchPlan{BatchID: "b1", Mutations: 320, Chunks: []models.Chunk{
		chunk("channex", 3, 0, 100, 100), chunk("channex", 3, 1, 100, 100), chunk("channex", 3, 2, 100, 100),
		chunk("channex", 3, 3, 20, 20)},
		InFlight: []models.ChannelInFlight{{Channel: "channex", Properties: 50, InFlight: 24}}}
	s.env.OnActivity(models.ActivityPrepareBatch, mock.Anything, mock.Anything).Return(plan, nil).Once()
	got := s.startedChildren()

	s.env.ExecuteWorkflow(BatchSync, models.BatchSyncInput{BatchID: "b1", Mutations: []models.Mutation{{ID: "m1"}}})
	s.Require().NoError(s.env.GetWorkflowError())

	s.Require().Len(*got, 4)
	// The first chunk takes the whole budget, so the next waits for it; the last,
	// smaller than the budget, takes only its requests.
	s.Equal(24, (*got)[0].window)
	s.Equal(24, (*got)[1].window)
	s.Equal(time.Minute, (*got)[1].at, "the budget is spent: the next chunk waits")
	s.Equal(20, (*got)[3].window)
}

func (s *unitSuite) TestSmallChunksShareTheBudgetAndOtherChannelsAreNotHeldBack() {
	plan := models.BatchPlan{BatchID: "b1", Mutations: 16, Chunks: []models.Chunk{
		chunk("channex", 3, 0, 4, 4), chunk("channex", 3, 1, 4, 4), chunk("channex", 3, 2, 4, 4),
		chunk("channex", 3, 3, 4, 4), chunk("expedia", 3, 0, 4, 4)},
		InFlight: []models.ChannelInFlight{{Channel: "channex", InFlight: 10}, {Channel: "expedia", InFlight: 4}}}
	s.env.OnActivity(models.ActivityPrepareBatch, mock.Anything, mock.Anything).Return(plan, nil).Once()
	got := s.startedChildren()

	s.env.ExecuteWorkflow(BatchSync, models.BatchSyncInput{BatchID: "b1", Mutations: []models.Mutation{{ID: "m1"}}})
	s.Require().NoError(s.env.GetWorkflowError())

	at := map[string]startedChild{}
	for _, c := range *got {
		at[c.key] = c
	}
	key := func(ch string, n int) string { return models.ChannelSyncWorkflowID("b1", ch, 3, n) }
	s.Equal(startedChild{key("channex", 0), 4, 0}, at[key("channex", 0)])
	s.Equal(startedChild{key("channex", 1), 4, 0}, at[key("channex", 1)])
	s.Equal(startedChild{key("channex", 2), 2, 0}, at[key("channex", 2)], "what the budget leaves")
	s.Equal(time.Minute, at[key("channex", 3)].at, "10 in flight at most")
	s.Equal(startedChild{key("expedia", 0), 4, 0}, at[key("expedia", 0)],
		"a channel with room starts though one before it in the plan waits")
}
