package app

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
)

// A channel's budget lives under the worker's key prefix: two workers of one task
// queue with different prefixes keep two budgets, and each spends the channel's
// whole limit. Redis cannot see that (the keys differ), so the task queue does:
// each worker names its prefix in its Temporal identity, and a worker whose task
// queue is polled by one that names another prefix refuses to start.

// prefixMark starts the prefix in a worker's identity.
const prefixMark = "@prefix="

// workerIdentity is the SDK's default identity (pid@host@) with the key prefix.
func workerIdentity(prefix string) string {
	host, _ := os.Hostname()
	return fmt.Sprintf("%d@%s%s%s", os.Getpid(), host, prefixMark, prefix)
}

// prefixOf is the key prefix an identity names; false for an identity without one.
func prefixOf(identity string) (string, bool) {
	i := strings.Index(identity, prefixMark)
	if i < 0 {
		return "", false
	}
	return identity[i+len(prefixMark):], true
}

// pollerFreshness is how recently a poller must have polled to count as running:
// a live worker's long polls reach the server at least once a minute or so.
const pollerFreshness = 2 * time.Minute

// taskQueueDescriber is the part of the Temporal client the check reads.
type taskQueueDescriber interface {
	DescribeTaskQueue(ctx context.Context, queue string, t enumspb.TaskQueueType) (*workflowservice.DescribeTaskQueueResponse, error)
}

// checkTaskQueuePrefix fails when a worker that polled queue within
// pollerFreshness names a key prefix other than prefix, naming both.
func checkTaskQueuePrefix(ctx context.Context, tc taskQueueDescriber, queue, prefix string, now time.Time) error {
	var others []string
	for _, t := range []enumspb.TaskQueueType{enumspb.TASK_QUEUE_TYPE_WORKFLOW, enumspb.TASK_QUEUE_TYPE_ACTIVITY} {
		resp, err := tc.DescribeTaskQueue(ctx, queue, t)
		if err != nil {
			return fmt.Errorf("describe task queue %s: %w", queue, err)
		}
		for _, p := range resp.GetPollers() {
			theirs, ok := prefixOf(p.GetIdentity())
			if !ok || theirs == prefix || now.Sub(p.GetLastAccessTime().AsTime()) > pollerFreshness {
				continue
			}
			if o := fmt.Sprintf("%s (key prefix %q)", p.GetIdentity(), theirs); !slices.Contains(others, o) {
				others = append(others, o)
			}
		}
	}
	if len(others) == 0 {
		return nil
	}
	return fmt.Errorf("task queue %s is polled by %s; this worker's PARITYSYNC_KEY_PREFIX is %q: "+
		"two prefixes keep two budgets for every channel, so every worker of a task queue must use the same",
		queue, strings.Join(others, ", "), prefix)
}

var _ taskQueueDescriber = client.Client(nil)
