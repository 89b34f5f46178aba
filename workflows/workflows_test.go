package workflows

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"github.com/stretchr/testify/suite"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/paritysync/paritysync/activities"
	"github.com/paritysync/paritysync/activities/store"
	"github.com/paritysync/paritysync/models"
)

type unitSuite struct {
	suite.Suite
	testsuite.WorkflowTestSuite
	env    *testsuite.TestWorkflowEnvironment
	timers []time.Duration
	// released lists the batches whose payload was released.
	released []string
	// finished lists the batches' recorded ends (FinishBatch).
	finished []models.BatchFinished
}

func TestWorkflows(t *testing.T) { suite.Run(t, new(unitSuite)) }

func (s *unitSuite) SetupTest() {
	s.newEnv()
	// Lanes hold their first slots in one activity; unless a test says otherwise the
	// limiter holds none, and every lane asks with its first push.
	s.env.OnActivity(models.ActivityReserveSlots, mock.Anything, mock.Anything).Return(nil, nil).Maybe()
}

func (s *unitSuite) newEnv() {
	s.env = s.NewTestWorkflowEnvironment()
	s.env.RegisterWorkflow(BatchSync)
	s.env.RegisterWorkflow(ChannelSync)
	activities.Register(s.env, &activities.Activities{})
	s.released, s.finished = nil, nil
	s.env.OnActivity(models.ActivityFinishBatch, mock.Anything, mock.Anything).Return(func(_ context.Context, in models.BatchFinished) error {
		s.finished = append(s.finished, in)
		return nil
	}).Maybe()
	s.env.OnActivity(models.ActivityPruneStore, mock.Anything).Return(store.Pruned{}, nil).Maybe()
	s.env.OnActivity(models.ActivityReleaseBatch, mock.Anything, mock.Anything).Return(func(_ context.Context, id string) error {
		s.released = append(s.released, id)
		return nil
	}).Maybe()
	s.timers = nil
	s.env.SetOnTimerScheduledListener(func(_ string, d time.Duration) { s.timers = append(s.timers, d) })
}

func (s *unitSuite) AfterTest(_, _ string) { s.env.AssertExpectations(s.T()) }

func chunk(channel string, priority, n, requests, updates int) models.Chunk {
	return models.Chunk{Channel: channel, Priority: priority, N: n, Requests: requests, Updates: updates,
		Key: models.ChannelSyncWorkflowID("b1", channel, priority, n)}
}

// onPush mocks PushRequest with fn, called one push at a time: the test
// environment runs mocked activities side by side, on goroutines of their own.
func (s *unitSuite) onPush(fn func(models.PushInput) (models.PushResult, error)) *testsuite.MockCallWrapper {
	var mu sync.Mutex
	return s.env.OnActivity(models.ActivityPushRequest, mock.Anything, mock.Anything).Return(
		func(_ context.Context, in models.PushInput) (models.PushResult, error) {
			mu.Lock()
			defer mu.Unlock()
			return fn(in)
		})
}

func throttled(wait time.Duration) error {
	return activities.FailureError(models.ErrThrottled, models.Failure{Wait: wait, ServerWait: true, Status: 429})
}

func (s *unitSuite) runChannelSync(c models.Chunk) models.ChannelCounts {
	return s.runChild(models.ChannelSyncInput{BatchID: "b1", Chunk: c, Window: 1})
}

// runChild runs ChannelSync with in to its end and returns its counts.
func (s *unitSuite) runChild(in models.ChannelSyncInput) models.ChannelCounts {
	s.env.ExecuteWorkflow(ChannelSync, in)
	s.Require().True(s.env.IsWorkflowCompleted())
	s.Require().NoError(s.env.GetWorkflowError())
	var counts models.ChannelCounts
	s.Require().NoError(s.env.GetWorkflowResult(&counts))
	return counts
}

func (s *unitSuite) Test429WaitsExactlyRetryAfterThenCommits() {
	s.env.OnActivity(models.ActivityPushRequest, mock.Anything, mock.Anything).Return(models.PushResult{}, throttled(17*time.Second)).Once()
	s.env.OnActivity(models.ActivityPushRequest, mock.Anything, mock.Anything).Return(models.PushResult{Committed: 3}, nil).Once()

	counts := s.runChannelSync(chunk("booking_com", 3, 0, 1, 3))

	s.Equal([]time.Duration{17 * time.Second}, s.timers)
	s.Equal(3, counts.Committed)
	s.Equal(1, counts.Deferred)
	s.Zero(counts.DeadLettered)
}

func (s *unitSuite) TestRetryAfterIsCappedByMaxWait() {
	s.env.OnActivity(models.ActivityPushRequest, mock.Anything, mock.Anything).Return(models.PushResult{}, throttled(time.Hour)).Once()
	s.env.OnActivity(models.ActivityPushRequest, mock.Anything, mock.Anything).Return(models.PushResult{Committed: 1}, nil).Once()

	s.runChannelSync(chunk("booking_com", 3, 0, 1, 1))

	s.Equal([]time.Duration{models.DefaultRetryPolicy().MaxWait}, s.timers)
}

func (s *unitSuite) Test503BacksOffWithJitterThenCommits() {
	transient := activities.FailureError(models.ErrTransient, models.Failure{Status: 503})
	s.env.OnActivity(models.ActivityPushRequest, mock.Anything, mock.Anything).Return(models.PushResult{}, transient).Twice()
	s.env.OnActivity(models.ActivityPushRequest, mock.Anything, mock.Anything).Return(models.PushResult{Committed: 2}, nil).Once()

	counts := s.runChannelSync(chunk("expedia", 3, 0, 1, 2))

	p := models.DefaultRetryPolicy()
	key := "default-test-workflow-id/0"
	s.Equal([]time.Duration{Backoff(p, key, 1), Backoff(p, key, 2)}, s.timers)
	s.LessOrEqual(s.timers[0], p.Initial)
	s.LessOrEqual(s.timers[1], 2*p.Initial)
	s.Equal(2, counts.Committed)
}

func (s *unitSuite) TestTransientFailuresExhaustAttemptsThenDeadLetter() {
	transient := activities.FailureError(models.ErrTransient, models.Failure{Status: 500})
	s.env.OnActivity(models.ActivityPushRequest, mock.Anything, mock.Anything).Return(models.PushResult{}, transient).Times(5)
	s.env.OnActivity(models.ActivityRecordDeadLetter, mock.Anything, mock.MatchedBy(func(in models.DeadLetterInput) bool {
		return in.Reason == models.ReasonRetryExhausted && in.Status == 500
	})).Return(models.DeadLetterResult{Updates: 4}, nil).Once()

	counts := s.runChannelSync(chunk("expedia", 3, 0, 1, 4))

	s.Len(s.timers, 4)
	s.Equal(4, counts.DeadLettered)
}

func (s *unitSuite) Test400DeadLettersWithoutRetry() {
	rejected := activities.FailureError(models.ErrRejected, models.Failure{Status: 400, Message: "lines[0].amount: invalid"})
	s.env.OnActivity(models.ActivityPushRequest, mock.Anything, mock.Anything).Return(models.PushResult{}, rejected).Once()
	s.env.OnActivity(models.ActivityRecordDeadLetter, mock.Anything, mock.MatchedBy(func(in models.DeadLetterInput) bool {
		return in.Reason == models.ReasonRejected && in.Status == 400 && in.Message == "lines[0].amount: invalid"
	})).Return(models.DeadLetterResult{Updates: 2}, nil).Once()

	counts := s.runChannelSync(chunk("agoda", 3, 0, 1, 2))

	s.Empty(s.timers)
	s.Equal(2, counts.DeadLettered)
	s.Zero(counts.Committed)
}

func (s *unitSuite) Test401RefreshesOnceThenDeadLetters() {
	auth := activities.FailureError(models.ErrAuthExpired, models.Failure{Status: 401})
	s.env.OnActivity(models.ActivityPushRequest, mock.Anything, mock.MatchedBy(func(in models.PushInput) bool { return !in.RefreshCredential })).
		Return(models.PushResult{}, auth).Once()
	s.env.OnActivity(models.ActivityPushRequest, mock.Anything, mock.MatchedBy(func(in models.PushInput) bool { return in.RefreshCredential })).
		Return(models.PushResult{}, auth).Once()
	s.env.OnActivity(models.ActivityRecordDeadLetter, mock.Anything, mock.MatchedBy(func(in models.DeadLetterInput) bool {
		return in.Reason == models.ReasonAuth
	})).Return(models.DeadLetterResult{Updates: 1}, nil).Once()

	counts := s.runChannelSync(chunk("agoda", 3, 0, 1, 1))
	s.Equal(1, counts.DeadLettered)
}

func (s *unitSuite) TestPartialSuccessDeadLettersOnlyFailedLines() {
	s.env.OnActivity(models.ActivityPushRequest, mock.Anything, mock.Anything).Return(models.PushResult{
		Committed: 5, Failed: []models.FailedLine{{Line: 2, Code: "closed", Message: "room closed"}},
	}, nil).Once()
	s.env.OnActivity(models.ActivityRecordDeadLetter, mock.Anything, mock.MatchedBy(func(in models.DeadLetterInput) bool {
		return in.Reason == models.ReasonLineFailed && len(in.Lines) == 1 && in.Lines[0] == 2
	})).Return(models.DeadLetterResult{Updates: 1}, nil).Once()

	counts := s.runChannelSync(chunk("agoda", 3, 0, 1, 6))
	s.Equal(5, counts.Committed)
	s.Equal(1, counts.DeadLettered)
}

func (s *unitSuite) TestPauseSignalHoldsNewRequestsUntilResume() {
	var calls []time.Time
	s.onPush(func(models.PushInput) (models.PushResult, error) {
		calls = append(calls, s.env.Now())
		if len(calls) == 1 {
			return models.PushResult{}, throttled(10 * time.Second)
		}
		return models.PushResult{Committed: 1}, nil
	})
	start := s.env.Now()
	s.env.RegisterDelayedCallback(func() {
		s.env.SignalWorkflow(models.SignalPauseChannel, models.PauseSignal{Channel: "booking_com", Reason: "maintenance"})
	}, time.Second)
	s.env.RegisterDelayedCallback(func() {
		var st ChannelStatus
		v, err := s.env.QueryWorkflow(models.QueryStatus)
		s.Require().NoError(err)
		s.Require().NoError(v.Get(&st))
		s.Equal("maintenance", st.Paused)
		s.env.SignalWorkflow(models.SignalResumeChannel, models.PauseSignal{Channel: "booking_com"})
	}, time.Hour)

	counts := s.runChannelSync(chunk("booking_com", 3, 0, 3, 3))

	s.Equal(3, counts.Committed)
	s.Require().Len(calls, 4)
	s.Equal(start, calls[0])
	for _, at := range calls[1:] {
		s.GreaterOrEqual(at.Sub(start), time.Hour, "a request went out while paused")
	}
}

func (s *unitSuite) TestMixedBatchCountsEveryOutcome() {
	plan := models.BatchPlan{BatchID: "b1", Mutations: 12,
		Chunks: []models.Chunk{chunk("booking_com", 3, 0, 2, 6), chunk("expedia", 3, 0, 1, 3)},
		Decided: []models.ChannelCounts{
			{Channel: "booking_com", Total: 6 + 2 + 1, Rejected: 2, Superseded: 1},
			{Channel: "expedia", Total: 3},
		},
	}
	s.env.OnActivity(models.ActivityPrepareBatch, mock.Anything, mock.Anything).Return(plan, nil).Once()
	rejected := activities.FailureError(models.ErrRejected, models.Failure{Status: 422})
	s.env.OnActivity(models.ActivityPushRequest, mock.Anything, mock.Anything).Return(
		func(_ context.Context, in models.PushInput) (models.PushResult, error) {
			switch {
			case in.ChunkKey == plan.Chunks[1].Key:
				return models.PushResult{}, rejected
			case in.Index == 0:
				return models.PushResult{Committed: 3}, nil
			default:
				return models.PushResult{Committed: 1, Superseded: 1, Failed: []models.FailedLine{{Line: 1}}}, nil
			}
		})
	s.env.OnActivity(models.ActivityRecordDeadLetter, mock.Anything, mock.MatchedBy(func(in models.DeadLetterInput) bool {
		return in.Reason == models.ReasonLineFailed
	})).Return(models.DeadLetterResult{Updates: 1}, nil)
	s.env.OnActivity(models.ActivityRecordDeadLetter, mock.Anything, mock.MatchedBy(func(in models.DeadLetterInput) bool {
		return in.Reason == models.ReasonRejected
	})).Return(models.DeadLetterResult{Updates: 3}, nil)

	s.env.ExecuteWorkflow(BatchSync, models.BatchSyncInput{BatchID: "b1"})
	s.Require().NoError(s.env.GetWorkflowError())
	var st models.BatchStatus
	s.Require().NoError(s.env.GetWorkflowResult(&st))

	s.True(st.Done)
	s.Equal([]models.ChannelCounts{
		{Channel: "booking_com", Total: 9, Committed: 4, Superseded: 2, Rejected: 2, DeadLettered: 1, Requests: 2},
		{Channel: "expedia", Total: 3, DeadLettered: 3},
	}, st.Channels)
	for _, c := range st.Channels {
		s.Equal(c.Total, c.Done(), "every update of %s has an outcome", c.Channel)
	}
	s.Equal([]string{"b1"}, s.released, "a finished batch releases its payload once")
}

func (s *unitSuite) TestUrgentChunksStartFirst() {
	plan := models.BatchPlan{BatchID: "b1", Mutations: 3, Chunks: []models.Chunk{
		chunk("booking_com", 5, 0, 1, 1), chunk("expedia", 3, 0, 1, 1), chunk("agoda", 1, 0, 1, 1), chunk("booking_com", 1, 0, 1, 1),
	}}
	s.env.OnActivity(models.ActivityPrepareBatch, mock.Anything, mock.Anything).Return(plan, nil).Once()
	var order []string
	s.env.OnActivity(models.ActivityPushRequest, mock.Anything, mock.Anything).Return(
		func(_ context.Context, in models.PushInput) (models.PushResult, error) {
			order = append(order, in.ChunkKey)
			return models.PushResult{Committed: 1}, nil
		})

	s.env.ExecuteWorkflow(BatchSync, models.BatchSyncInput{BatchID: "b1", MaxRunningChildren: 1})
	s.Require().NoError(s.env.GetWorkflowError())

	s.Equal([]string{plan.Chunks[2].Key, plan.Chunks[3].Key, plan.Chunks[1].Key, plan.Chunks[0].Key}, order)
}

func (s *unitSuite) TestBatchForwardsPauseToRunningChildren() {
	plan := models.BatchPlan{BatchID: "b1", Mutations: 2, Chunks: []models.Chunk{chunk("booking_com", 3, 0, 2, 2)}}
	s.env.OnActivity(models.ActivityPrepareBatch, mock.Anything, mock.Anything).Return(plan, nil).Once()
	var calls []time.Time
	start := s.env.Now()
	s.env.OnActivity(models.ActivityPushRequest, mock.Anything, mock.Anything).Return(
		func(_ context.Context, in models.PushInput) (models.PushResult, error) {
			calls = append(calls, s.env.Now())
			if len(calls) == 1 {
				return models.PushResult{}, throttled(time.Minute)
			}
			return models.PushResult{Committed: 1}, nil
		})
	s.env.RegisterDelayedCallback(func() {
		s.env.SignalWorkflow(models.SignalPauseChannel, models.PauseSignal{Channel: "booking_com", Reason: "rate dispute"})
	}, time.Second)
	s.env.RegisterDelayedCallback(func() {
		s.env.SignalWorkflow(models.SignalResumeChannel, models.PauseSignal{Channel: "booking_com"})
	}, 2*time.Hour)

	s.env.ExecuteWorkflow(BatchSync, models.BatchSyncInput{BatchID: "b1", Window: 1})
	s.Require().NoError(s.env.GetWorkflowError())

	s.Require().Len(calls, 3)
	s.GreaterOrEqual(calls[1].Sub(start), 2*time.Hour)
}

func TestBackoffIsFullJitterAndBounded(t *testing.T) {
	p := models.RetryPolicy{Initial: time.Second, Max: time.Minute, Attempts: 5}
	for attempt := 1; attempt <= 12; attempt++ {
		ceiling := min(time.Second<<(attempt-1), time.Minute)
		seen := map[time.Duration]bool{}
		for k := range 50 {
			d := Backoff(p, "wf/"+string(rune('a'+k)), attempt)
			require.Greater(t, d, time.Duration(0))
			require.LessOrEqual(t, d, ceiling+time.Millisecond)
			seen[d] = true
		}
		require.Greater(t, len(seen), 40, "waits of attempt %d are spread, not lockstep", attempt)
	}
	require.Equal(t, Backoff(p, "x", 3), Backoff(p, "x", 3), "same key and attempt, same wait")
}

func (s *unitSuite) continuedInput(into any) {
	err := s.env.GetWorkflowError()
	var can *workflow.ContinueAsNewError
	s.Require().True(errors.As(err, &can), "want continue-as-new, got %v", err)
	s.Require().NoError(converter.GetDefaultDataConverter().FromPayloads(can.Input, into))
}

func (s *unitSuite) TestChannelSyncContinuesAsNewWithItsProgress() {
	// Each push takes 10 s of workflow time; the history fills up at 35 s.
	var mu sync.Mutex // mocked activities run on goroutines of their own
	pushed := map[int]bool{}
	s.env.OnActivity(models.ActivityPushRequest, mock.Anything, mock.Anything).Return(
		func(_ context.Context, in models.PushInput) (models.PushResult, error) {
			mu.Lock()
			defer mu.Unlock()
			pushed[in.Index] = true
			return models.PushResult{Committed: 2}, nil
		}).After(10 * time.Second)
	s.env.RegisterDelayedCallback(func() { s.env.SetCurrentHistoryLength(MaxHistory) }, 35*time.Second)

	s.env.ExecuteWorkflow(ChannelSync, models.ChannelSyncInput{BatchID: "b1", Chunk: chunk("agoda", 3, 0, 20, 40), Window: 2})

	var next models.ChannelSyncInput
	s.continuedInput(&next)
	s.NotEmpty(next.Remaining)
	s.Less(len(next.Remaining), 20)
	s.Equal(2*(20-len(next.Remaining)), next.Counts.Committed, "progress carried into the next run")
	// The next run gets exactly what this one did not push: each lane hands back the
	// request it had taken next, whichever of the lanes' pushes finished first.
	mu.Lock()
	defer mu.Unlock()
	var want []int
	for i := range 20 {
		if !pushed[i] {
			want = append(want, i)
		}
	}
	left := slices.Clone(next.Remaining)
	slices.Sort(left)
	s.Equal(want, left, "the next run starts where this one stopped: %v", next.Remaining)
}

func (s *unitSuite) TestBatchSyncContinuesAsNewWithItsPlan() {
	var chunks []models.Chunk
	for n := range 12 {
		chunks = append(chunks, chunk("expedia", 3, n, 1, 1))
	}
	plan := models.BatchPlan{BatchID: "b1", Mutations: 12, Chunks: chunks,
		Decided: []models.ChannelCounts{{Channel: "expedia", Total: 12}}}
	s.env.OnActivity(models.ActivityPrepareBatch, mock.Anything, mock.Anything).Return(plan, nil).Once()
	s.env.OnActivity(models.ActivityPushRequest, mock.Anything, mock.Anything).Return(models.PushResult{Committed: 1}, nil).After(10 * time.Second)
	s.env.RegisterDelayedCallback(func() { s.env.SetContinueAsNewSuggested(true) }, 25*time.Second)

	s.env.ExecuteWorkflow(BatchSync, models.BatchSyncInput{BatchID: "b1", Mutations: []models.Mutation{{ID: "m1"}},
		MaxRunningChildren: 2})

	var next models.BatchSyncInput
	s.continuedInput(&next)
	s.Require().NotNil(next.Carry)
	s.Empty(next.Mutations, "the continuation does not carry the batch again")
	s.Greater(next.Carry.Next, 0)
	s.Less(next.Carry.Next, 12)
	s.Len(next.Carry.Results, next.Carry.Next, "every started chunk finished before continuing")
	s.Equal(plan.Chunks, next.Carry.Plan.Chunks)
}

func (s *unitSuite) TestReconcileRepairsOnlyDriftedChannels() {
	s.env.OnActivity(models.ActivityDiffChannel, mock.Anything, mock.MatchedBy(func(in models.DiffInput) bool { return in.Channel == "agoda" })).
		Return(models.ChannelDrift{Channel: "agoda", Checked: 40}, nil).Once()
	s.env.OnActivity(models.ActivityDiffChannel, mock.Anything, mock.MatchedBy(func(in models.DiffInput) bool {
		return in.Channel == "expedia" && in.To.DaysSince(in.From) == 6
	})).Return(models.ChannelDrift{Channel: "expedia", Checked: 40, Drifted: 3, PayloadKey: "k"}, nil).Once()
	s.env.OnWorkflow(BatchSync, mock.Anything, mock.MatchedBy(func(in models.BatchSyncInput) bool {
		return in.PayloadKey == "k" && strings.HasPrefix(in.BatchID, "repair-") && strings.HasSuffix(in.BatchID, "-expedia")
	})).Return(models.BatchStatus{Done: true, Channels: []models.ChannelCounts{{Channel: "expedia", Total: 3, Committed: 3}}}, nil).Once()

	s.env.ExecuteWorkflow(Reconcile, models.ReconcileInput{Channels: []string{"agoda", "expedia"}, HorizonDays: 7})

	s.Require().NoError(s.env.GetWorkflowError())
	var res models.ReconcileResult
	s.Require().NoError(s.env.GetWorkflowResult(&res))
	s.Require().Len(res.Channels, 2)
	s.Nil(res.Channels[0].Repair, "no drift, no repair batch")
	s.Require().NotNil(res.Channels[1].Repair)
	s.Equal(3, res.Channels[1].Repair.Totals().Committed)
}

func TestRepairBatchIDsNeverCollide(t *testing.T) {
	// Two runs on one day (a nightly one and an operator's) repair separately.
	a, b := repairBatchID("run-a", "agoda"), repairBatchID("run-b", "agoda")
	if a == b {
		t.Fatalf("two runs name their repair of agoda %q", a)
	}
}

func (s *unitSuite) TestReconcileWithoutChannelsFails() {
	s.env.ExecuteWorkflow(Reconcile, models.ReconcileInput{})
	s.Error(s.env.GetWorkflowError())
}

func heldSlot(wait time.Duration) error {
	return activities.FailureError(models.ErrRateLimited, models.Failure{Wait: wait, Held: true})
}

func (s *unitSuite) TestHeldSlotIsOneTimerAndWaitingNeverDeadLetters() {
	// Far more waits than the throttling budget allows: budget waits never count.
	waits := models.DefaultRetryPolicy().MaxDeferrals + 5
	s.env.OnActivity(models.ActivityPushRequest, mock.Anything, mock.Anything).Return(models.PushResult{}, heldSlot(40*time.Second)).Times(waits)
	s.env.OnActivity(models.ActivityPushRequest, mock.Anything, mock.Anything).Return(models.PushResult{Committed: 2}, nil).Once()

	counts := s.runChannelSync(chunk("booking_com", 3, 0, 1, 2))

	s.Len(s.timers, waits)
	// Half the activity's short wait early: the push waits the rest in process.
	s.Equal(40*time.Second-models.DefaultShortWait/2, s.timers[0])
	s.Equal(2, counts.Committed)
	s.Zero(counts.DeadLettered)
}

func (s *unitSuite) TestLaneWaitsForTheNextSlotItsPushReserved() {
	var inputs []models.PushInput
	s.env.OnActivity(models.ActivityPushRequest, mock.Anything, mock.Anything).Return(
		func(_ context.Context, in models.PushInput) (models.PushResult, error) {
			inputs = append(inputs, in)
			res := models.PushResult{Committed: 1}
			if in.NextReservation != "" {
				res.Next = &models.Slot{Index: in.Next, Wait: 9 * time.Second}
			}
			return res, nil
		}).Times(3)

	counts := s.runChannelSync(chunk("booking_com", 3, 0, 3, 3))

	s.Equal(3, counts.Committed)
	// One timer per request after the first, each the slot its predecessor reserved.
	early := 9*time.Second - models.DefaultShortWait/2
	s.Equal([]time.Duration{early, early}, s.timers)
	s.Require().Len(inputs, 3)
	for i, in := range inputs {
		s.Equal(i, in.Index)
		s.True(strings.HasSuffix(in.Reservation, "/"+strconv.Itoa(i)), in.Reservation)
		if i < 2 {
			s.Equal(i+1, in.Next)
			s.NotEmpty(in.NextReservation)
		} else {
			s.Empty(in.NextReservation)
		}
	}
}

func (s *unitSuite) TestLanesStartOnSlotsHeldInOneActivity() {
	s.newEnv() // without the default ReserveSlots mock
	var asked models.ReserveSlotsInput
	s.env.OnActivity(models.ActivityReserveSlots, mock.Anything, mock.Anything).Return(
		func(_ context.Context, in models.ReserveSlotsInput) ([]models.Slot, error) {
			asked = in
			return []models.Slot{{Index: 0, Wait: 20 * time.Second}, {Index: 2, Wait: 21 * time.Second}}, nil
		}).Once()
	s.env.OnActivity(models.ActivityPushRequest, mock.Anything, mock.Anything).Return(models.PushResult{Committed: 1}, nil).Times(4)

	s.env.ExecuteWorkflow(ChannelSync, models.ChannelSyncInput{BatchID: "b1", Chunk: chunk("agoda", 3, 0, 4, 4), Window: 2})

	s.Require().NoError(s.env.GetWorkflowError())
	// Lane 1 starts with request 0 and holds 1 next; lane 2 starts with 2.
	s.Equal([]int{0, 2}, asked.Indexes)
	s.Len(asked.Reservations, 2)
	early := models.DefaultShortWait / 2
	s.ElementsMatch([]time.Duration{20*time.Second - early, 21*time.Second - early}, s.timers)
}

func (s *unitSuite) TestNearSlotIsWaitedInTheActivityNotATimer() {
	s.env.OnActivity(models.ActivityPushRequest, mock.Anything, mock.Anything).Return(
		func(_ context.Context, in models.PushInput) (models.PushResult, error) {
			res := models.PushResult{Committed: 1}
			if in.NextReservation != "" {
				res.Next = &models.Slot{Index: in.Next, Wait: time.Second}
			}
			return res, nil
		}).Times(2)

	s.runChannelSync(chunk("booking_com", 3, 0, 2, 2))

	s.Empty(s.timers)
}

func (s *unitSuite) TestLimiterPauseIsOneLongWaitThatAResumeEnds() {
	paused := activities.FailureError(models.ErrRateLimited, models.Failure{Wait: 30 * time.Minute, Paused: "maintenance"})
	s.env.OnActivity(models.ActivityPushRequest, mock.Anything, mock.Anything).Return(models.PushResult{}, paused).Times(3)
	s.env.OnActivity(models.ActivityPushRequest, mock.Anything, mock.Anything).Return(models.PushResult{Committed: 1}, nil).Once()
	// The pause lasts 70 minutes; a resume signal ends it before the third poll.
	s.env.RegisterDelayedCallback(func() {
		s.env.SignalWorkflow(models.SignalResumeChannel, models.PauseSignal{Channel: "booking_com"})
	}, 70*time.Minute)

	counts := s.runChannelSync(chunk("booking_com", 3, 0, 1, 1))

	s.Equal(1, counts.Committed)
	s.Equal([]time.Duration{30 * time.Minute, 30 * time.Minute, 30 * time.Minute}, s.timers)
}
