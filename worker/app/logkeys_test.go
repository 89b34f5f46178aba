package app

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/interceptor"
	tlog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/paritysync/paritysync/models"
)

// lockedBuffer is a log sink safe for the workflow and activity goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) lines(containing string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, line := range strings.Split(l.b.String(), "\n") {
		if strings.Contains(line, containing) {
			out = append(out, line)
		}
	}
	return out
}

func pushSomething(ctx context.Context) error {
	activity.GetLogger(ctx).Info("activity says hello")
	return nil
}

func chunkWorkflow(ctx workflow.Context) error {
	workflow.GetLogger(ctx).Info("workflow says hello")
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: time.Minute})
	return workflow.ExecuteActivity(ctx, pushSomething).Get(ctx, nil)
}

func TestLogLinesCarryBatchChannelAndPriority(t *testing.T) {
	var sink lockedBuffer
	var suite testsuite.WorkflowTestSuite
	suite.SetLogger(tlog.NewStructuredLogger(slog.New(slog.NewTextHandler(&sink, nil))))
	env := suite.NewTestWorkflowEnvironment()
	env.SetWorkerOptions(worker.Options{Interceptors: []interceptor.WorkerInterceptor{&logKeys{}}})
	env.RegisterActivity(pushSomething)
	env.SetStartWorkflowOptions(client.StartWorkflowOptions{ID: models.ChannelSyncWorkflowID("b-42", "expedia", 2, 0)})
	env.ExecuteWorkflow(chunkWorkflow)
	require.NoError(t, env.GetWorkflowError())
	for _, msg := range []string{"workflow says hello", "activity says hello"} {
		lines := sink.lines(msg)
		require.Len(t, lines, 1, msg)
		for _, kv := range []string{"batch=b-42", "channel=expedia", "priority=2"} {
			require.Contains(t, lines[0], kv, msg)
		}
	}
}
