package e2e

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/paritysync/paritysync/models"
)

// Reading the histories of a stack's workflows, and recording them for the replay
// tests (workflows/replay_test.go) with PARITYSYNC_RECORD_HISTORY=1 (make
// record-histories).

// recording reports whether the end-to-end run should write the histories of its
// workflows to workflows/testdata for the replay tests (PARITYSYNC_RECORD_HISTORY=1).
func recording() bool { return os.Getenv("PARITYSYNC_RECORD_HISTORY") != "" }

// listChildIDs are the ChannelSync workflow ids of a batch, as visibility lists
// them now.
func listChildIDs(tc client.Client, batchID string) ([]string, error) {
	resp, err := tc.ListWorkflow(context.Background(), &workflowservice.ListWorkflowExecutionsRequest{
		Query: "WorkflowType = 'ChannelSync' AND " + models.SearchAttrBatchID + " = '" + batchID + "'",
	})
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, e := range resp.GetExecutions() {
		ids = append(ids, e.GetExecution().GetWorkflowId())
	}
	return ids, nil
}

// childIDs are the ChannelSync workflow ids of a batch.
func childIDs(t *testing.T, tc client.Client, batchID string) []string {
	t.Helper()
	ids, err := listChildIDs(tc, batchID)
	require.NoError(t, err)
	return ids
}

// onlyChild is the id of the batch's one ChannelSync child, once visibility lists it.
func onlyChild(t *testing.T, s *e2eStack, batchID string) string {
	t.Helper()
	var id string
	require.Eventually(t, func() bool {
		ids, err := listChildIDs(s.TC, batchID)
		if err != nil || len(ids) != 1 {
			return false
		}
		id = ids[0]
		return true
	}, 10*time.Second, 50*time.Millisecond, "the batch's child")
	return id
}

// runHistory is the whole history of one run of a workflow ("": the latest).
func runHistory(t *testing.T, tc client.Client, wfID, runID string) *historypb.History {
	t.Helper()
	var h historypb.History
	iter := tc.GetWorkflowHistory(context.Background(), wfID, runID, false, 0)
	for iter.HasNext() {
		e, err := iter.Next()
		require.NoError(t, err)
		h.Events = append(h.Events, e)
	}
	return &h
}

// history is the whole history of the workflow's latest run.
func history(t *testing.T, tc client.Client, wfID string) *historypb.History {
	t.Helper()
	return runHistory(t, tc, wfID, "")
}

// describeRun is the run id of the workflow's current run.
func describeRun(t *testing.T, tc client.Client, wfID string) string {
	t.Helper()
	desc, err := tc.DescribeWorkflowExecution(context.Background(), wfID, "")
	require.NoError(t, err)
	return desc.GetWorkflowExecutionInfo().GetExecution().GetRunId()
}

// runHistories is the history of every run of the workflow, oldest first, following
// the continue-as-new chain back from the current run.
func runHistories(t *testing.T, tc client.Client, wfID string) []*historypb.History {
	t.Helper()
	var runs []*historypb.History
	for run := describeRun(t, tc, wfID); run != ""; {
		h := runHistory(t, tc, wfID, run)
		runs = append([]*historypb.History{h}, runs...)
		run = h.Events[0].GetWorkflowExecutionStartedEventAttributes().GetContinuedExecutionRunId()
	}
	return runs
}

// recordHistories writes a real batch's history and one of its children's.
func recordHistories(t *testing.T, tc client.Client, batchID string) {
	if !recording() {
		return
	}
	writeHistory(t, tc, models.BatchWorkflowID(batchID), "batchsync.json")
	ids := childIDs(t, tc, batchID)
	require.NotEmpty(t, ids)
	writeHistory(t, tc, ids[0], "channelsync.json")
}

// writeLongestChild writes the history of the batch's ChannelSync child with the
// most events: the one that went through the most paths.
func writeLongestChild(t *testing.T, tc client.Client, batchID, name string) {
	t.Helper()
	ids := childIDs(t, tc, batchID)
	require.NotEmpty(t, ids)
	var longest *historypb.History
	for _, id := range ids {
		if h := history(t, tc, id); longest == nil || len(h.Events) > len(longest.Events) {
			longest = h
		}
	}
	saveHistory(t, longest, name)
}

// writeChildWith writes the history of the batch's ChannelSync child with the most
// activity failures of the given type (the longest of those on a tie).
func writeChildWith(t *testing.T, tc client.Client, batchID, failure, name string) {
	t.Helper()
	var best *historypb.History
	most := 0
	for _, id := range childIDs(t, tc, batchID) {
		h := history(t, tc, id)
		n := 0
		for _, ev := range h.Events {
			if a := ev.GetActivityTaskFailedEventAttributes(); a != nil && a.GetFailure().GetApplicationFailureInfo().GetType() == failure {
				n++
			}
		}
		if n > most || (n == most && n > 0 && len(h.Events) > len(best.Events)) {
			best, most = h, n
		}
	}
	require.NotNil(t, best, "a child of %s with a %s failure", batchID, failure)
	saveHistory(t, best, name)
}

func writeHistory(t *testing.T, tc client.Client, wfID, name string) {
	t.Helper()
	saveHistory(t, history(t, tc, wfID), name)
}

// saveHistory writes h to workflows/testdata/name for the replay test.
func saveHistory(t *testing.T, h *historypb.History, name string) {
	t.Helper()
	b, err := protojson.MarshalOptions{Indent: "  "}.Marshal(h)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join("..", "workflows", "testdata", name), b, 0o644))
}
