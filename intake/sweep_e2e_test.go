package main

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/paritysync/paritysync/activities/store"
)

// listedState is batchID's state and end in GET /v1/batches (operator's view),
// ok false when the first page does not list it.
func listedState(t *testing.T, c *contract, h http.Handler, batchID string) (store.BatchSummary, bool) {
	t.Helper()
	for _, b := range listPage(t, c, h, testKey, "/v1/batches?limit=500").Batches {
		if b.BatchID == batchID {
			return b.BatchSummary, true
		}
	}
	return store.BatchSummary{}, false
}

// TestListingTellsABatchTerminatedInTemporal terminates a running batch in
// Temporal (as the UI or `temporal workflow terminate` does: no code of the batch
// runs again, so no FinishBatch) and finds it listed terminated, with its end, a
// few sweeps later, without a cancel; a batch Temporal never knew is listed
// unknown once it is past sweepGone, and one it runs stays running.
func TestListingTellsABatchTerminatedInTemporal(t *testing.T) {
	t.Parallel()
	c, s, h := startAPI(t, func(cfg *Config) { cfg.BatchSweep = time.Second })
	ctx := context.Background()

	// A paused channel holds the batch running until it is terminated.
	resp := c.do(t, h, request(http.MethodPost, "/v1/channels/expedia/pause", `{"reason":"sweep test"}`), true)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	defer c.do(t, h, request(http.MethodPost, "/v1/channels/expedia/resume", ""), true)
	stopped := decodeJSON[batchAccepted](t, c.do(t, h, request(http.MethodPost, "/v1/batches",
		"["+mutationRow("sw1", "expedia", 1)+"]"), true))
	held := decodeJSON[batchAccepted](t, c.do(t, h, request(http.MethodPost, "/v1/batches",
		"["+mutationRow("sw2", "expedia", 2)+"]"), true))
	b, ok := listedState(t, c, h, stopped.BatchID)
	require.True(t, ok)
	require.Equal(t, "running", b.State)

	require.NoError(t, s.TC.TerminateWorkflow(ctx, stopped.WorkflowID, "", "sweep test"))
	require.Eventually(t, func() bool {
		b, _ := listedState(t, c, h, stopped.BatchID)
		return b.State == "terminated"
	}, 30*time.Second, 200*time.Millisecond, "the sweeper records the end Temporal describes")
	b, _ = listedState(t, c, h, stopped.BatchID)
	require.False(t, b.EndedAt.IsZero(), "with its end")
	ids := listPage(t, c, h, testKey, "/v1/batches?state=terminated").ids()
	require.Contains(t, ids, stopped.BatchID, "and the state filter finds it")
	b, _ = listedState(t, c, h, held.BatchID)
	require.Equal(t, "running", b.State, "a batch Temporal still runs stays running")

	// A row Temporal does not know (a start that failed after its payload was
	// saved): left alone while young, unknown once past sweepGone.
	require.NoError(t, s.st.RegisterBatch(ctx, "acme.never-started"))
	sw := &batchSweeper{tc: s.TC, st: s.st, every: time.Second, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	require.NoError(t, sw.look(ctx, store.RunningBatch{BatchID: "acme.never-started", CreatedAt: time.Now()}))
	b, _ = listedState(t, c, h, "acme.never-started")
	require.Equal(t, "running", b.State, "its start may still be on its way")
	require.NoError(t, sw.look(ctx, store.RunningBatch{BatchID: "acme.never-started", CreatedAt: time.Now().Add(-sweepGone)}))
	b, _ = listedState(t, c, h, "acme.never-started")
	require.Equal(t, store.StateUnknown, b.State)
}
