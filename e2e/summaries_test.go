package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/converter"

	"github.com/paritysync/paritysync/models"
)

// summaries are the UI summaries of h's events of type typ, in order.
func summaries(t *testing.T, h *historypb.History, typ enumspb.EventType) []string {
	t.Helper()
	var out []string
	for _, e := range h.GetEvents() {
		if e.GetEventType() != typ {
			continue
		}
		var s string
		if p := e.GetUserMetadata().GetSummary(); p != nil {
			require.NoError(t, converter.GetDefaultDataConverter().FromPayload(p, &s))
		}
		out = append(out, s)
	}
	return out
}

func anyHas(ss []string, prefix string) bool {
	for _, s := range ss {
		if strings.HasPrefix(s, prefix) {
			return true
		}
	}
	return false
}

// In a real history the activities, timers and children carry summaries in the
// domain's words, and waiting for a slot or a pause is no failed activity.
func TestEndToEndHistoriesCarrySummaries(t *testing.T) {
	srv := parallelDevServer(t)
	// expedia: 2 back to back, then one every 10 s: the later requests wait for
	// their slots with timers.
	s := startStack(t, srv, map[string]int{"expedia": 6, "agoda": 60})
	ctx := context.Background()

	st := s.runBatch(t, "summaries", rateChanges("expedia", 4, 3, 1, 3, "120.00"))
	require.Equal(t, 12, st.Totals().Committed)
	parent := history(t, s.TC, models.BatchWorkflowID("summaries"))
	prepared := summaries(t, parent, enumspb.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED)
	require.True(t, anyHas(prepared, "prepare batch summaries: validate 12 mutations"), "%q", prepared)
	children := summaries(t, parent, enumspb.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED)
	require.Equal(t, []string{"expedia, priority 3, chunk 0: 4 requests, 12 updates"}, children)

	ids := childIDs(t, s.TC, "summaries")
	require.Len(t, ids, 1)
	child := history(t, s.TC, ids[0])
	pushes := summaries(t, child, enumspb.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED)
	day := benchDay()
	want := "push rates prop_00000002 " + models.NightsSummary(day, day.AddDays(2)) + ", 3 lines"
	require.Contains(t, pushes, want, "a push names its family, hotel, nights and lines: %q", pushes)
	timers := summaries(t, child, enumspb.EVENT_TYPE_TIMER_STARTED)
	require.True(t, anyHas(timers, "wait for slot "), "a slot wait says when: %q", timers)
	for _, e := range child.GetEvents() {
		require.NotEqual(t, enumspb.EVENT_TYPE_ACTIVITY_TASK_FAILED, e.GetEventType(),
			"pacing is no failed activity: %v", e.GetActivityTaskFailedEventAttributes().GetFailure())
	}
	t.Logf("parent: %q %q\nchild: pushes %q\ntimers %q", prepared, children, pushes, timers)

	// A paused channel: the lane's wait says why.
	require.NoError(t, s.Lim.Pause(ctx, "agoda", "rate dispute"))
	run := s.startMutations(t, "summaries-paused", rateChanges("agoda", 1, 2, 1, 3, "99.00"))
	var pauseTimers []string
	require.Eventually(t, func() bool {
		for _, id := range childIDs(t, s.TC, "summaries-paused") {
			pauseTimers = summaries(t, history(t, s.TC, id), enumspb.EVENT_TYPE_TIMER_STARTED)
		}
		return anyHas(pauseTimers, "paused: rate dispute")
	}, 30*time.Second, 300*time.Millisecond, "the pause's timer names the reason: %q", pauseTimers)
	require.NoError(t, s.Lim.Resume(ctx, "agoda"))
	require.NoError(t, s.TC.SignalWorkflow(ctx, models.BatchWorkflowID("summaries-paused"), "", models.SignalResumeChannel,
		models.PauseSignal{Channel: "agoda"}))
	var done models.BatchStatus
	require.NoError(t, run.Get(ctx, &done))
	require.Equal(t, 2, done.Totals().Committed)
}
