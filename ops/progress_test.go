package ops

import (
	"context"
	"sync"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/paritysync/paritysync/activities/store"
	"github.com/paritysync/paritysync/models"
)

// describingClient is a Temporal client that answers describes with a state and
// counts them; any other call (a query) panics through the nil embedded client.
type describingClient struct {
	client.Client
	mu        sync.Mutex
	describes int
	status    enumspb.WorkflowExecutionStatus
}

func (c *describingClient) DescribeWorkflowExecution(context.Context, string, string) (*workflowservice.DescribeWorkflowExecutionResponse, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.describes++
	return &workflowservice.DescribeWorkflowExecutionResponse{WorkflowExecutionInfo: &workflowpb.WorkflowExecutionInfo{
		Status: c.status, StartTime: timestamppb.Now()}}, nil
}

// scriptedProgress answers the polls with the next progress of its script, then
// the last one; after each read it calls after with the read's number.
type scriptedProgress struct {
	script []store.Progress
	reads  int
	after  func(read int)
}

func (s *scriptedProgress) BatchProgress(context.Context, string) (store.Progress, error) {
	p := s.script[min(s.reads, len(s.script)-1)]
	s.reads++
	if s.after != nil {
		s.after(s.reads)
	}
	return p, nil
}

func progressOf(done, total int) store.Progress {
	return store.Progress{Planned: true, Channels: []models.ChannelCounts{{Channel: "expedia", Total: total, Committed: done}}}
}

// TestWatchBatchDescribesOnlyWhenTheCountsSayDone: while the counts say updates
// remain, following a batch describes it once (at the start) and queries it never;
// once they say done it describes until the batch has ended, and the last poll
// handed on is the final read, after the end.
func TestWatchBatchDescribesOnlyWhenTheCountsSayDone(t *testing.T) {
	tc := &describingClient{status: enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING}
	st := &scriptedProgress{script: []store.Progress{
		{}, progressOf(0, 10), progressOf(4, 10), progressOf(9, 10), progressOf(10, 10), progressOf(10, 10)}}
	st.after = func(read int) {
		if read == 6 { // the workflow ends while the 6th read's counts say done
			tc.mu.Lock()
			tc.status = enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED
			tc.mu.Unlock()
		}
	}
	var polls []Poll
	state, err := WatchBatch(context.Background(), tc, st, "b", time.Millisecond, func(p Poll) { polls = append(polls, p) })
	if err != nil {
		t.Fatal(err)
	}
	if state != StateDone {
		t.Fatalf("state %q, want done", state)
	}
	// Reads 1-4 are not done: one describe at the start. Reads 5 and 6 say done:
	// a describe each; the second sees the end, and one more read follows it.
	if tc.describes != 3 {
		t.Fatalf("%d describes over %d reads, want 3 (start, and each read saying done)", tc.describes, st.reads)
	}
	if st.reads != 7 || len(polls) != 6 {
		t.Fatalf("%d reads and %d polls, want 7 and 6", st.reads, len(polls))
	}
	if last := polls[len(polls)-1]; last.State != StateDone || !last.Progress.Done() {
		t.Fatalf("the last poll is the final read: %+v", last)
	}
}

// TestWatchBatchDescribesAtLeastEveryDescribeEvery: counts that never say done (a
// batch whose plan is not recorded) still learn of the end, by a describe every
// describeEvery, not one per read.
func TestWatchBatchDescribesAtLeastEveryDescribeEvery(t *testing.T) {
	describeEvery = 50 * time.Millisecond
	t.Cleanup(func() { describeEvery = DescribeEvery })
	tc := &describingClient{status: enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING}
	st := &scriptedProgress{script: []store.Progress{{}}}
	time.AfterFunc(300*time.Millisecond, func() {
		tc.mu.Lock()
		tc.status = enumspb.WORKFLOW_EXECUTION_STATUS_TERMINATED
		tc.mu.Unlock()
	})
	began := time.Now()
	state, err := WatchBatch(context.Background(), tc, st, "b", time.Millisecond, func(Poll) {})
	elapsed := time.Since(began)
	if err != nil {
		t.Fatal(err)
	}
	if state != StateTerminated {
		t.Fatalf("state %q, want terminated", state)
	}
	if most := 1 + int(elapsed/describeEvery); tc.describes < 2 || tc.describes > most {
		t.Fatalf("%d describes over %d reads in %v: want the start and at most one per describeEvery (%d)",
			tc.describes, st.reads, elapsed, most)
	}
}

// TestProgressAtSumsCountsWithRatesSinceTheStart: a batch's counts come back as
// given (no counts: an empty list, not nil), with their totals and each channel's
// rate from the batch's start to now.
func TestProgressAtSumsCountsWithRatesSinceTheStart(t *testing.T) {
	start := time.Date(2027, 3, 1, 12, 0, 0, 0, time.UTC)
	r := BatchReport{Started: start}
	counts := []models.ChannelCounts{{Channel: "agoda", Total: 40, Committed: 10, Rejected: 10},
		{Channel: "expedia", Total: 10, Committed: 10}}
	p := r.ProgressAt(counts, start.Add(10*time.Second))
	if len(p.Channels) != 2 || p.Channels[0] != counts[0] || p.Channels[1] != counts[1] {
		t.Errorf("channels %+v, want %+v", p.Channels, counts)
	}
	if p.Totals.Channel != "all" || p.Totals.Total != 50 || p.Totals.Done() != 30 {
		t.Errorf("totals %+v, want all: 30 done of 50", p.Totals)
	}
	if len(p.Progress) != 2 || p.Progress[0].Rate != 2 || p.Progress[0].ETASeconds == nil || *p.Progress[0].ETASeconds != 10 {
		t.Errorf("agoda progress %+v, want 2/s with 10 s left", p.Progress)
	}
	if e := r.ProgressAt(nil, start); e.Channels == nil || len(e.Channels) != 0 || e.Progress == nil || e.Totals.Total != 0 {
		t.Errorf("no counts: %+v, want empty lists, zero totals", e)
	}
}
