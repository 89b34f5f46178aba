package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/paritysync/paritysync/dial/devtest"
	"github.com/paritysync/paritysync/e2e/stack"
	"github.com/paritysync/paritysync/models"
	"github.com/paritysync/paritysync/workflows"
)

// The system tests' side of the harness (e2e/stack) every system test, benchmark
// and production-topology scenario starts its stack with: a worker environment, a
// simulator enforcing the same limits, and workers, on a Temporal dev server
// (startStackWith) or on the production topology (prod_topology_test.go,
// newProdStack).

// TestMain stops the package's one dev server (devtest) after the tests.
func TestMain(m *testing.M) { devtest.Main(m) }

// temporalCLI finds the Temporal CLI binary that `make test` builds.
func temporalCLI(t *testing.T) string {
	t.Helper()
	path, err := devtest.CLI()
	if err != nil {
		t.Fatalf("no Temporal CLI at %s (make test builds it into .bin/; or set TEMPORAL_CLI): %v", path, err)
	}
	return path
}

// startDevServer is the test's namespace on the package's dev server (devtest: the
// new matcher with one partition and paritysync's search attributes, as production
// should run); it skips under -short.
func startDevServer(t *testing.T) *devtest.Env {
	t.Helper()
	return devtest.Start(t)
}

// parallelDevServer is startDevServer for a test that runs beside the others: it
// mostly waits on its channels' windows, and its stack shares nothing with theirs
// (a namespace, task queue, key prefix and schema of its own).
func parallelDevServer(t *testing.T) *devtest.Env {
	t.Helper()
	if testing.Short() {
		t.Skip("end-to-end: needs a Temporal dev server")
	}
	t.Parallel()
	return startDevServer(t)
}

// e2eStack is the harness's stack (e2e/stack) with the system tests' own helpers.
type e2eStack struct{ *stack.Stack }

// testWindow is the short window of the tests whose assertions are relative to it:
// a tenth of the real 60 s, long against the limiter's 500 ms lateness margin.
const testWindow = 6 * time.Second

// limitsOptions gives each channel of limits its limit (per window), a burst of a
// tenth of it (at least 2) and 4 lines a request.
func limitsOptions(limits map[string]int, env []func(map[string]string)) stack.Options {
	chs := map[string]stack.Channel{}
	for slug, limit := range limits {
		chs[slug] = stack.Channel{PerMinute: limit, Burst: max(2, limit/10), MaxLines: 4}
	}
	return stack.Options{Channels: chs, Edit: env}
}

// startStack starts a simulator and a worker on srv; env changes the worker's
// environment before it starts.
func startStack(t *testing.T, srv *devtest.Env, limits map[string]int, env ...func(map[string]string)) *e2eStack {
	t.Helper()
	return startStackWith(t, srv, limitsOptions(limits, env))
}

// startShortStack is startStack at the short test window: each channel's limit
// counts per testWindow instead of per minute.
func startShortStack(t *testing.T, srv *devtest.Env, limits map[string]int, env ...func(map[string]string)) *e2eStack {
	t.Helper()
	o := limitsOptions(limits, env)
	o.Window = testWindow
	return startStackWith(t, srv, o)
}

// startStackWith starts a stack on srv (stack.Start): the simulator over HTTP, the
// local Redis and o.Workers (at least one) in-process workers.
func startStackWith(t *testing.T, srv *devtest.Env, o stack.Options) *e2eStack {
	t.Helper()
	return &e2eStack{stack.Start(t, "e2e", srv, o)}
}

// startBatch starts a batch without waiting for it.
func (s *e2eStack) startBatch(t *testing.T, in models.BatchSyncInput) client.WorkflowRun {
	t.Helper()
	run, err := s.TC.ExecuteWorkflow(context.Background(), client.StartWorkflowOptions{
		ID: models.BatchWorkflowID(in.BatchID), TaskQueue: s.Queue,
		TypedSearchAttributes: temporal.NewSearchAttributes(
			temporal.NewSearchAttributeKeyKeyword(models.SearchAttrBatchID).ValueSet(in.BatchID)),
	}, workflows.BatchSync, in)
	require.NoError(t, err)
	return run
}

// startMutations starts a BatchSync of ms inline and returns its run.
func (s *e2eStack) startMutations(t *testing.T, batchID string, ms []models.Mutation) client.WorkflowRun {
	t.Helper()
	return s.startBatch(t, models.BatchSyncInput{BatchID: batchID, Mutations: ms, Retry: models.DefaultRetryPolicy()})
}

// runBatch runs a BatchSync of ms inline to its end.
func (s *e2eStack) runBatch(t *testing.T, batchID string, ms []models.Mutation) models.BatchStatus {
	t.Helper()
	return waitBatch(t, s.startMutations(t, batchID, ms), 6*time.Minute)
}

// waitBatch waits for a batch's status.
func waitBatch(t *testing.T, run client.WorkflowRun, timeout time.Duration) models.BatchStatus {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var st models.BatchStatus
	require.NoError(t, run.Get(ctx, &st), "batch %s", run.GetID())
	return st
}

// reconcile runs a Reconcile of channels to its end.
func (s *e2eStack) reconcile(t *testing.T, id string, channels []string) models.ReconcileResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	run, err := s.TC.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: s.Queue},
		workflows.Reconcile, models.ReconcileInput{Channels: channels, HorizonDays: 30})
	require.NoError(t, err)
	var res models.ReconcileResult
	require.NoError(t, run.Get(ctx, &res), id)
	return res
}
