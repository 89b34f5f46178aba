package ops

import (
	"context"
	"testing"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// pagedLister answers a visibility query with its pages, one a call.
type pagedLister struct {
	pages   [][]*workflowpb.WorkflowExecutionInfo
	queries []string
}

func (l *pagedLister) ListWorkflow(_ context.Context, req *workflowservice.ListWorkflowExecutionsRequest) (*workflowservice.ListWorkflowExecutionsResponse, error) {
	l.queries = append(l.queries, req.GetQuery())
	i := len(req.GetNextPageToken())
	resp := &workflowservice.ListWorkflowExecutionsResponse{Executions: l.pages[i]}
	if i+1 < len(l.pages) {
		resp.NextPageToken = make([]byte, i+1)
	}
	return resp, nil
}

func execution(id string, status enumspb.WorkflowExecutionStatus, started time.Time) *workflowpb.WorkflowExecutionInfo {
	return &workflowpb.WorkflowExecutionInfo{Execution: &commonpb.WorkflowExecution{WorkflowId: id}, Status: status,
		StartTime: timestamppb.New(started)}
}

// TestRunningBatchesReadsEveryPageOldestFirst: every page of the listing is read,
// the batches come oldest first with their batch ids, and a run the listing says
// is no longer running is left out.
func TestRunningBatchesReadsEveryPageOldestFirst(t *testing.T) {
	t0 := time.Date(2027, 3, 1, 12, 0, 0, 0, time.UTC)
	running := enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING
	l := &pagedLister{pages: [][]*workflowpb.WorkflowExecutionInfo{
		{execution("batch/b", running, t0.Add(time.Minute)), execution("batch/done", enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED, t0)},
		{execution("batch/a", running, t0)},
	}}
	got, err := RunningBatches(context.Background(), l)
	if err != nil {
		t.Fatal(err)
	}
	want := []RunningBatch{{BatchID: "a", WorkflowID: "batch/a", Started: t0}, {BatchID: "b", WorkflowID: "batch/b", Started: t0.Add(time.Minute)}}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("running batches %+v, want %+v", got, want)
	}
	if len(l.queries) != 2 || l.queries[0] != "WorkflowType = 'BatchSync' AND ExecutionStatus = 'Running'" {
		t.Fatalf("queries %q: want the running BatchSync query, once a page", l.queries)
	}
}
