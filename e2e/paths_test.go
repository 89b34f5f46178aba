package e2e

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/temporal"

	"github.com/paritysync/paritysync/dial/devtest"
	"github.com/paritysync/paritysync/models"
	"github.com/paritysync/paritysync/ops"
	"github.com/paritysync/paritysync/otasim/sim"
	"github.com/paritysync/paritysync/workflows"
)

// TestWorkflowPaths runs the workflows' less travelled paths end to end: an
// operator's pause and resume, a 429 waited out, a request dead-lettered after its
// attempts, a child that fails outright, a batch whose payload is gone. With
// PARITYSYNC_RECORD_HISTORY=1 it writes their histories to workflows/testdata for
// the replay test (make record-histories).
func TestWorkflowPaths(t *testing.T) {
	srv := parallelDevServer(t)
	// One chunk per channel and batch, so a child has several lanes and the whole
	// story; short windows: the assertions do not depend on the window's length.
	s := startShortStack(t, srv, map[string]int{"booking_com": 20, "expedia": 20, "agoda": 20},
		func(env map[string]string) { env["PARITYSYNC_CHUNK_SIZE"] = "100" })
	st := s.OpenStore(t)
	ctx := context.Background()

	t.Run("a paused channel sends nothing until it is resumed", func(t *testing.T) {
		const n = 30
		ms := rateChanges("expedia", n, 1, time.Now().UnixNano(), models.PriorityDefault, "80.00")
		id := "pause-" + uuid.NewString()[:8]
		run := s.startBatch(t, models.BatchSyncInput{BatchID: id, Mutations: ms, Retry: models.DefaultRetryPolicy()})
		require.Eventually(t, func() bool { return s.Sim.Stats()["expedia"].Accepted >= 5 }, time.Minute, 10*time.Millisecond)
		signalled, err := ops.SetPause(ctx, s.TC, s.Lim, "expedia", true, "maintenance", nil)
		require.NoError(t, err)
		require.Equal(t, 1, signalled, "the running batch is signalled")
		require.Eventually(t, func() bool {
			v, err := s.TC.QueryWorkflow(ctx, models.BatchWorkflowID(id), "", models.QueryStatus)
			var bs models.BatchStatus
			return err == nil && v.Get(&bs) == nil && slices.Contains(bs.Paused, "expedia")
		}, 10*time.Second, 50*time.Millisecond, "the batch reports the channel paused")
		child := onlyChild(t, s, id)
		require.Eventually(t, func() bool {
			v, err := s.TC.QueryWorkflow(ctx, child, "", models.QueryStatus)
			var cs workflows.ChannelStatus
			return err == nil && v.Get(&cs) == nil && cs.Paused == "maintenance"
		}, 10*time.Second, 50*time.Millisecond, "the batch forwards the pause to its child")
		// The pushes in flight at the pause end; after them nothing goes.
		time.Sleep(time.Second)
		paused := s.Sim.Stats()["expedia"].Accepted
		time.Sleep(testWindow / 2)
		require.Equal(t, paused, s.Sim.Stats()["expedia"].Accepted, "pushes sent while paused")
		require.Less(t, paused, n, "the pause came before the batch's end")

		_, err = ops.SetPause(ctx, s.TC, s.Lim, "expedia", false, "", nil)
		require.NoError(t, err)
		bs := waitBatch(t, run, 2*time.Minute)
		require.Equal(t, n, bs.Totals().Committed, "every update committed after the resume")
		require.Empty(t, bs.Paused)
		cs := s.Sim.Stats()["expedia"]
		require.Zero(t, cs.Throttled)
		require.LessOrEqual(t, cs.MaxWindowRequests, cs.Limit)
		t.Logf("paused after %d of %d pushes; %+v", paused, n, bs.Totals())
		if recording() {
			writeHistory(t, s.TC, models.BatchWorkflowID(id), "batchsync_pause.json")
			writeHistory(t, s.TC, child, "channelsync_pause.json")
		}
	})

	t.Run("a 429 is waited out for its Retry-After, then committed", func(t *testing.T) {
		const n = 10
		before := s.Sim.Stats()["booking_com"]
		// Counted from the first push: on a loaded machine the batch may reach the
		// channel after a storm counted from now has ended.
		require.NoError(t, s.Sim.SetFaults(sim.Faults{Channels: []string{"booking_com"}, StormSeconds: 8, StormStatus: 429,
			StormFromFirstPush: true}))
		defer func() { require.NoError(t, s.Sim.SetFaults(sim.Faults{})) }()
		ms := rateChanges("booking_com", n, 1, time.Now().UnixNano(), models.PriorityDefault, "81.00")
		id := "throttled-" + uuid.NewString()[:8]
		bs := waitBatch(t, s.startBatch(t, models.BatchSyncInput{BatchID: id, Mutations: ms, Retry: models.DefaultRetryPolicy()}),
			2*time.Minute)
		require.Equal(t, n, bs.Totals().Committed)
		require.Positive(t, bs.Totals().Deferred, "the 429s deferred requests")
		require.Positive(t, s.Sim.Stats()["booking_com"].Throttled-before.Throttled, "the channel answered 429")
		if recording() {
			writeChildWith(t, s.TC, id, models.ErrThrottled, "channelsync_throttled.json")
		}
	})

	t.Run("a request the channel keeps failing is dead-lettered after its attempts", func(t *testing.T) {
		require.NoError(t, s.Sim.SetFaults(sim.Faults{Channels: []string{"agoda"}, ErrorRatio: 1}))
		defer func() { require.NoError(t, s.Sim.SetFaults(sim.Faults{})) }()
		retry := models.DefaultRetryPolicy()
		retry.Attempts = 2
		ms := rateChanges("agoda", 2, 1, time.Now().UnixNano(), models.PriorityDefault, "82.00")
		id := "dead-" + uuid.NewString()[:8]
		bs := waitBatch(t, s.startBatch(t, models.BatchSyncInput{BatchID: id, Mutations: ms, Retry: retry}), 2*time.Minute)
		require.True(t, bs.Done)
		require.Equal(t, 2, bs.Totals().DeadLettered, "both requests parked")
		require.Equal(t, 2, storedTotal(t, st, id).DeadLettered, "and stored as dead-lettered")
		if recording() {
			writeChildWith(t, s.TC, id, models.ErrTransient, "channelsync_dead_letter.json")
		}
	})

	t.Run("a child that fails outright has its chunk parked, nothing lost", func(t *testing.T) {
		const n = 30
		ms := rateChanges("agoda", n, 1, time.Now().UnixNano(), models.PriorityDefault, "83.00")
		id := "childfail-" + uuid.NewString()[:8]
		run := s.startBatch(t, models.BatchSyncInput{BatchID: id, Mutations: ms, Retry: models.DefaultRetryPolicy()})
		before := s.Sim.Stats()["agoda"].Accepted
		require.Eventually(t, func() bool { return s.Sim.Stats()["agoda"].Accepted >= before+3 }, time.Minute, 10*time.Millisecond)
		child := onlyChild(t, s, id)
		require.NoError(t, s.TC.TerminateWorkflow(ctx, child, "", "the test fails the child"))
		bs := waitBatch(t, run, 2*time.Minute)
		require.True(t, bs.Done, "the batch goes on without the child")
		stored := storedTotal(t, st, id)
		t.Logf("child terminated; batch %+v; stored %+v", bs.Totals(), stored)
		require.Equal(t, n, stored.Total, "every update has one outcome")
		require.Positive(t, stored.Committed, "what the child pushed keeps its outcome")
		require.Positive(t, stored.DeadLettered, "the rest of its chunk is parked")
		require.Equal(t, stored.DeadLettered, bs.Totals().DeadLettered,
			"the batch counts as dead-lettered only what had no outcome, as stored")
		if recording() {
			writeHistory(t, s.TC, models.BatchWorkflowID(id), "batchsync_child_failed.json")
		}
	})

	t.Run("a batch whose stored payload is gone fails, naming the cause", func(t *testing.T) {
		id := "lost-" + uuid.NewString()[:8]
		run := s.startBatch(t, models.BatchSyncInput{BatchID: id, PayloadKey: models.BatchWorkflowID(id),
			Retry: models.DefaultRetryPolicy()})
		ctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		err := run.Get(ctx, nil)
		require.ErrorContains(t, err, id, "the error names the batch")
		var act *temporal.ActivityError
		require.ErrorAs(t, err, &act, "PrepareBatch failed")
		var ae *temporal.ApplicationError
		require.ErrorAs(t, act.Unwrap(), &ae)
		require.Equal(t, models.ErrPayloadLost, ae.Type())
		require.True(t, ae.NonRetryable(), "not retried: retrying cannot bring it back")
		if recording() {
			writeHistory(t, s.TC, models.BatchWorkflowID(id), "batchsync_payload_lost.json")
		}
	})
}

// TestChannelSyncContinuesAsNew runs a chunk longer than one run's history on a dev
// server of its own that suggests continuing as new past 60 events (a push may
// deliver several of a lane's requests, so 60 requests make a short history): the
// child continues as new, its held slots and counts carried over, and every update is
// committed once, within the window, without a 429. With PARITYSYNC_RECORD_HISTORY=1
// it records a run that continued as new.
func TestChannelSyncContinuesAsNew(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: needs a Temporal dev server")
	}
	t.Parallel()
	srv := devtest.StartOwn(t, "--dynamic-config-value", "limit.historyCount.suggestContinueAsNew=60")
	s := startShortStack(t, srv, map[string]int{"expedia": 30},
		func(env map[string]string) { env["PARITYSYNC_CHUNK_SIZE"] = "100" })
	const n = 60
	ms := rateChanges("expedia", n, 1, time.Now().UnixNano(), models.PriorityDefault, "84.00")
	id := "continued-" + uuid.NewString()[:8]
	bs := waitBatch(t, s.startBatch(t, models.BatchSyncInput{BatchID: id, Mutations: ms, Retry: models.DefaultRetryPolicy()}),
		3*time.Minute)
	require.Equal(t, n, bs.Totals().Committed)
	require.Equal(t, n, storedTotal(t, s.OpenStore(t), id).Committed, "one stored outcome per update")
	cs := s.Sim.Stats()["expedia"]
	require.Zero(t, cs.Throttled)
	require.Zero(t, cs.StaleReceived)
	require.LessOrEqual(t, cs.MaxWindowRequests, cs.Limit)

	var continued *workflowservice.ListWorkflowExecutionsResponse
	require.Eventually(t, func() bool {
		resp, err := s.TC.ListWorkflow(context.Background(), &workflowservice.ListWorkflowExecutionsRequest{
			Query: "WorkflowType = 'ChannelSync' AND ExecutionStatus = 'ContinuedAsNew' AND " +
				models.SearchAttrBatchID + " = '" + id + "'"})
		if err != nil || len(resp.Executions) == 0 {
			return false
		}
		continued = resp
		return true
	}, 10*time.Second, 100*time.Millisecond, "the chunk's child continued as new")
	t.Logf("%d runs continued as new; channel %+v", len(continued.Executions), cs)
	if recording() {
		var longest *historypb.History
		for _, e := range continued.Executions {
			if h := runHistory(t, s.TC, e.Execution.WorkflowId, e.Execution.RunId); longest == nil || len(h.Events) > len(longest.Events) {
				longest = h
			}
		}
		require.Equal(t, enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW, longest.Events[len(longest.Events)-1].EventType)
		saveHistory(t, longest, "channelsync_continued.json")
	}
}
