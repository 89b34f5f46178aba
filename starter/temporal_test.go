package main

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"

	"github.com/paritysync/paritysync/activities/store"
	"github.com/paritysync/paritysync/dial/devtest"
	"github.com/paritysync/paritysync/models"
)

// TestBatchStatusOfEndedAndUnknownBatches: a batch Temporal does not know exits 66
// (status and cancel); one that ended reads done in JSON, and both forms exit alike.
func TestBatchStatusOfEndedAndUnknownBatches(t *testing.T) {
	env, st := storeEnv(t)
	srv := devtest.Start(t)
	env["TEMPORAL_ADDRESS"], env["TEMPORAL_NAMESPACE"] = srv.FrontendHostPort(), srv.Namespace()
	tc := srv.Client()
	ctx := context.Background()

	for _, args := range [][]string{{"batch", "status", "nosuch"}, {"batch", "status", "nosuch", "-o", "json"},
		{"batch", "cancel", "nosuch"}} {
		code, out, errOut := runCLI(t, env, args...)
		require.Equal(t, exitNotFound, code, "%v: %s", args, errOut)
		require.Contains(t, errOut, "no batch nosuch", "%v", args)
		require.Empty(t, out, "%v", args)
	}

	// A batch that ended (terminated: no worker polls its queue) with one rejected
	// mutation recorded.
	_, err := tc.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: models.BatchWorkflowID("b-end"), TaskQueue: "nobody-polls"},
		"BatchSync", models.BatchSyncInput{BatchID: "b-end"})
	require.NoError(t, err)
	require.NoError(t, tc.TerminateWorkflow(ctx, models.BatchWorkflowID("b-end"), "", "test"))
	_, err = st.RecordOutcomes(ctx, "b-end", []store.MutationOutcome{
		{MutationID: "m1", Channel: "expedia", Outcome: models.OutcomeCommitted},
		{MutationID: "m2", Channel: "expedia", Outcome: models.OutcomeRejected, Reason: "currency: must be an active ISO 4217 code"}})
	require.NoError(t, err)

	code, out, errOut := runCLI(t, env, "batch", "status", "b-end", "-o", "json")
	require.Equal(t, exitReported, code, errOut)
	var rep statusReport
	require.NoError(t, json.Unmarshal([]byte(out), &rep), out)
	require.True(t, rep.Done, "an ended batch is done")
	require.Equal(t, "terminated", rep.State)
	require.Equal(t, models.ChannelCounts{Channel: "all", Total: 2, Committed: 1, Rejected: 1}, rep.Totals)

	code, out, errOut = runCLI(t, env, "batch", "status", "batch/b-end")
	require.Equal(t, exitReported, code, "the table exits as the JSON does: %s", errOut)
	require.Contains(t, out, "batch/b-end: terminated")

	// Completion offers the batches Temporal knows, by the prefix typed.
	require.Eventually(t, func() bool {
		_, out, _ := runCLI(t, env, "__complete", "batch", "cancel", "b-")
		return slices.Contains(strings.Fields(out), "b-end")
	}, 10*time.Second, 200*time.Millisecond, "batch ids complete (visibility is eventually consistent)")
	_, out, _ = runCLI(t, env, "__complete", "batch", "status", "zz")
	require.NotContains(t, out, "b-end")
}
