package workflows

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/worker"
)

// TestReplay replays histories recorded from real runs on a Temporal dev server (the
// end-to-end test writes them with PARITYSYNC_RECORD_HISTORY=1). A change to the
// workflows that would break running executions fails here.
func TestReplay(t *testing.T) {
	for _, tc := range []struct {
		file     string
		workflow any
	}{
		{"batchsync.json", BatchSync},
		{"channelsync.json", ChannelSync},
		{"reconcile.json", Reconcile},
		{"smoother.json", BurstSmoother},
		// Recorded before the plan sized in-flight pushes per channel and before
		// the smoother ran batches side by side: runs started then still replay.
		{"batchsync-before-inflight.json", BatchSync},
		{"channelsync-before-inflight.json", ChannelSync},
		{"smoother-serial.json", BurstSmoother},
	} {
		t.Run(tc.file, func(t *testing.T) {
			r := worker.NewWorkflowReplayer()
			r.RegisterWorkflow(tc.workflow)
			require.NoError(t, r.ReplayWorkflowHistoryFromJSONFile(nil, filepath.Join("testdata", tc.file)))
		})
	}
}
