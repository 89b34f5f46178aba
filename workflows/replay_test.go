package workflows

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/worker"
)

// TestReplay replays histories recorded from real runs on a Temporal dev server. A
// change to the workflows that would break running executions fails here; a
// deliberate one re-records them all with one command, `make record-histories`
// (the worker's end-to-end tests with PARITYSYNC_RECORD_HISTORY=1).
func TestReplay(t *testing.T) {
	for _, tc := range []struct {
		file     string
		workflow any
	}{
		{"batchsync.json", BatchSync},
		// A batch cancelled by the operator while its children were pushing.
		{"batchsync_cancel.json", BatchSync},
		{"channelsync.json", ChannelSync},
		// Several lanes, held slots and the waits of a 429 storm.
		{"channelsync_storm.json", ChannelSync},
		// A child cancelled with its batch.
		{"channelsync_cancel.json", ChannelSync},
		// An operator's pause and resume, forwarded by the batch to its child, which
		// also waits out the limiter's pause.
		{"batchsync_pause.json", BatchSync},
		{"channelsync_pause.json", ChannelSync},
		// A 429 from the channel waited out for its Retry-After (Throttled).
		{"channelsync_throttled.json", ChannelSync},
		// A run that continued as new, its queue and held slots handed on.
		{"channelsync_continued.json", ChannelSync},
		// Requests dead-lettered after their attempts (Transient, then RecordDeadLetter).
		{"channelsync_dead_letter.json", ChannelSync},
		// A child that failed outright (terminated): its chunk parked by the batch.
		{"batchsync_child_failed.json", BatchSync},
		// PrepareBatch failing non-retryably (the payload is gone): the batch fails.
		{"batchsync_payload_lost.json", BatchSync},
		{"reconcile.json", Reconcile},
		{"smoother.json", BurstSmoother},
		// Recorded before the plan sized in-flight pushes per channel: runs
		// started then still replay.
		{"batchsync-before-inflight.json", BatchSync},
		{"channelsync-before-inflight.json", ChannelSync},
		// A submit refused at the admission limit (SmootherFull).
		{"smoother_refused.json", BurstSmoother},
		// A batch that records its end (FinishBatch) with a callback URL
		// (intake's callback test).
		{"batchsync_finish.json", BatchSync},
		// At the admission limit behind a held batch, terminated and closed; then
		// continued as new with what waits.
		{"smoother_continued.json", BurstSmoother},
	} {
		t.Run(tc.file, func(t *testing.T) {
			r := worker.NewWorkflowReplayer()
			r.RegisterWorkflow(tc.workflow)
			require.NoError(t, r.ReplayWorkflowHistoryFromJSONFile(nil, filepath.Join("testdata", tc.file)))
		})
	}
}
