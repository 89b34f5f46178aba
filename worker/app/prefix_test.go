package app

import (
	"context"
	"strings"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	taskqueuepb "go.temporal.io/api/taskqueue/v1"
	"go.temporal.io/api/workflowservice/v1"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// pollers is a task queue whose pollers the test sets, by queue type.
type pollers map[enumspb.TaskQueueType][]*taskqueuepb.PollerInfo

func (p pollers) DescribeTaskQueue(_ context.Context, _ string, t enumspb.TaskQueueType) (*workflowservice.DescribeTaskQueueResponse, error) {
	return &workflowservice.DescribeTaskQueueResponse{Pollers: p[t]}, nil
}

// The check refuses a task queue polled recently under another key prefix, naming
// both, and ignores pollers under the same prefix, pollers that name none and
// pollers that stopped polling more than pollerFreshness ago.
func TestTaskQueuePrefixCheck(t *testing.T) {
	now := time.Now()
	poller := func(prefix string, ago time.Duration) *taskqueuepb.PollerInfo {
		id := "1@host@"
		if prefix != "" {
			id = workerIdentity(prefix)
		}
		return &taskqueuepb.PollerInfo{Identity: id, LastAccessTime: timestamppb.New(now.Add(-ago))}
	}
	ctx := context.Background()
	ok := pollers{
		enumspb.TASK_QUEUE_TYPE_WORKFLOW: {poller("ps:", time.Second), poller("", time.Second)},
		enumspb.TASK_QUEUE_TYPE_ACTIVITY: {poller("old:", pollerFreshness+time.Second)},
	}
	if err := checkTaskQueuePrefix(ctx, ok, "q", "ps:", now); err != nil {
		t.Fatalf("same prefix, no prefix, a stale one: %v", err)
	}
	bad := pollers{enumspb.TASK_QUEUE_TYPE_ACTIVITY: {poller("other:", 10*time.Second)}}
	err := checkTaskQueuePrefix(ctx, bad, "q", "ps:", now)
	if err == nil || !strings.Contains(err.Error(), `"other:"`) || !strings.Contains(err.Error(), `"ps:"`) ||
		!strings.Contains(err.Error(), "PARITYSYNC_KEY_PREFIX") {
		t.Fatalf("another prefix: %v, want an error naming both prefixes", err)
	}
	// A prefix is read whole, whatever it holds.
	if got, _ := prefixOf(workerIdentity("a@prefix=b")); got != "a@prefix=b" {
		t.Errorf("prefixOf the identity of prefix %q: %q", "a@prefix=b", got)
	}
}
