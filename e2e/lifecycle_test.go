package e2e

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/paritysync/paritysync/models"
	"github.com/paritysync/paritysync/otasim/sample"
	"github.com/paritysync/paritysync/otasim/sim"
)

// The lifecycle test drives the operator CLI (the starter binary, built here)
// against a stack: starting an id twice, cancelling, re-running, replaying dead
// letters, two repairs on one day.

// starterCLI builds the starter once per test.
func starterCLI(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "starter")
	out, err := exec.Command("go", "build", "-o", bin, "../starter").CombinedOutput()
	require.NoError(t, err, "build starter: %s", out)
	return bin
}

// starter runs one starter command against the stack and returns its output and
// exit status.
func (s *e2eStack) starter(t *testing.T, bin string, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "PARITYSYNC_TOKEN=unused")
	for k, v := range s.Env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	out, err := cmd.CombinedOutput()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else {
		require.NoError(t, err)
	}
	t.Logf("starter %s (exit %d):\n%s", strings.Join(args, " "), code, out)
	return string(out), code
}

func writeBatchFile(t *testing.T, ms []models.Mutation) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "batch.json")
	body, err := json.Marshal(ms)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(path, body, 0o600))
	return path
}

func TestBatchLifecycle(t *testing.T) {
	srv := parallelDevServer(t)
	// Short windows: nothing here depends on the window's length, only on its budget.
	s := startShortStack(t, srv, map[string]int{"booking_com": 20, "expedia": 20, "agoda": 20})
	st := s.OpenStore(t)
	bin := starterCLI(t)
	today := models.DateOf(time.Now())

	// Reconciliation first: the cancelled batch below leaves desired state that
	// the channels do not hold, which a later reconciliation would rightly repair.
	t.Run("two drift repairs on one day both repair", func(t *testing.T) {
		for round, amount := range []string{"60.00", "61.00"} {
			ms := rateCells("agoda", 2, today.AddDays(12), int64(10+round), amount)
			require.NoError(t, s.Sim.SetFaults(sim.Faults{Channels: []string{"agoda"}, DriftRatio: 1}))
			waitBatch(t, s.startBatch(t, models.BatchSyncInput{BatchID: "drift-" + uuid.NewString()[:8], Mutations: ms,
				Retry: models.DefaultRetryPolicy()}), 2*time.Minute)
			require.NoError(t, s.Sim.SetFaults(sim.Faults{}))
			res := s.reconcile(t, "reconcile/e2e-twice-"+uuid.NewString()[:8], []string{"agoda"})
			require.Equal(t, 2, res.Channels[0].Drifted, "round %d", round)
			require.NotNil(t, res.Channels[0].Repair)
			require.Equal(t, 2, res.Channels[0].Repair.Totals().Committed, "round %d repairs", round)
		}
	})
	t.Run("dlq replay after the cause is fixed, and of a cell that moved on", func(t *testing.T) {
		night := today.AddDays(9)
		v1 := rateCells("expedia", 2, night, 1, "70.00")
		require.NoError(t, s.Sim.SetFaults(sim.Faults{Channels: []string{"expedia"}, ErrorRatio: 1}))
		retry := models.DefaultRetryPolicy()
		retry.Attempts = 1
		id := "dlq-" + uuid.NewString()[:8]
		b := waitBatch(t, s.startBatch(t, models.BatchSyncInput{BatchID: id, Mutations: v1, Retry: retry}), 2*time.Minute)
		require.Equal(t, 2, b.Totals().DeadLettered)
		require.NoError(t, s.Sim.SetFaults(sim.Faults{})) // the cause is fixed

		// The second property's cell moves on to v2 meanwhile.
		v2 := rateCells("expedia", 2, night, 2, "75.00")[1:]
		b2 := waitBatch(t, s.startBatch(t, models.BatchSyncInput{BatchID: id + "-v2", Mutations: v2,
			Retry: models.DefaultRetryPolicy()}), 2*time.Minute)
		require.Equal(t, 1, b2.Totals().Committed)
		before := s.Sim.Stats()["expedia"]

		out, code := s.starter(t, bin, "dlq", "export", "--batch", id)
		require.Zero(t, code)
		// JSON lines on stdout; the count of entries goes to stderr.
		require.Equal(t, 2, strings.Count(out, "\n{")+boolInt(strings.HasPrefix(out, "{")), "one entry per property's request")
		out, code = s.starter(t, bin, "dlq", "replay", "--batch", id, "--wait")
		require.Contains(t, []int{0, 3}, code)
		after := s.Sim.Stats()["expedia"]
		require.Zero(t, after.StaleReceived, "v1 never follows v2")
		require.Contains(t, out, "replaying 2 entries")
		fields := strings.Fields(out)
		require.NotEmpty(t, fields)
		replay := strings.TrimPrefix(fields[6], "batch/")
		replay = strings.TrimSuffix(replay, ";")
		c := storedTotal(t, st, replay)
		t.Logf("replay %s: %+v; channel requests %d -> %d", replay, c, before.Requests, after.Requests)
		require.Equal(t, 1, c.Committed, "the fixed cell is committed")
		require.Equal(t, 1, c.Superseded, "the cell that moved on sends nothing older")
		out, _ = s.starter(t, bin, "dlq", "list", "--channel", "expedia")
		require.Contains(t, out, "0 entries", "replayed entries are acknowledged")
	})

	t.Run("same id twice, other content, cancel, re-run", func(t *testing.T) {
		ms := sample.Batch(600, today, time.Now().Unix(), 11)
		file := writeBatchFile(t, ms)
		id := "life-" + uuid.NewString()[:8]
		out, code := s.starter(t, bin, "batch", "start", "--file", file, "--id", id)
		require.Zero(t, code)
		require.Contains(t, out, "started")

		out, code = s.starter(t, bin, "batch", "start", "--file", file, "--id", id)
		require.Zero(t, code)
		require.Contains(t, out, "attached")

		other := writeBatchFile(t, ms[:10])
		out, code = s.starter(t, bin, "batch", "start", "--file", other, "--id", id)
		require.Equal(t, 70, code, "refused: a general error")
		require.Contains(t, out, "other content")
		stored, err := st.LoadBatch(context.Background(), models.BatchWorkflowID(id))
		require.NoError(t, err)
		require.Len(t, stored, len(ms), "the running batch's payload is intact")

		require.Eventually(t, func() bool {
			c := storedTotal(t, st, id)
			return c.Committed > 0
		}, 2*time.Minute, 200*time.Millisecond)
		out, code = s.starter(t, bin, "batch", "cancel", id)
		require.Zero(t, code)
		c := storedTotal(t, st, id)
		t.Logf("cancelled: %+v", c)
		require.Equal(t, expectedUpdates(t, ms), c.Total, "outcomes add up to the batch")
		require.Positive(t, c.Committed)
		require.Positive(t, c.Cancelled)
		out, code = s.starter(t, bin, "batch", "status", id)
		require.Equal(t, 3, code, "an ended batch with rejected updates is reported, in table form as in JSON")
		require.Contains(t, out, "cancelled")

		out, code = s.starter(t, bin, "batch", "start", "--file", file, "--id", id)
		require.Equal(t, 70, code, "refused: a general error")
		require.Contains(t, out, "already ran")
		out, code = s.starter(t, bin, "batch", "start", "--file", file, "--id", id, "--rerun")
		require.Zero(t, code)
		require.Contains(t, out, id+".rerun-")
		rerun := strings.Fields(strings.SplitN(out, "started ", 2)[1])[0]
		_, code = s.starter(t, bin, "batch", "cancel", rerun)
		require.Zero(t, code)
		if recording() {
			// A cancelled batch and a child cancelled with it, once they have closed.
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			_ = s.TC.GetWorkflow(ctx, models.BatchWorkflowID(id), "").Get(ctx, nil)
			writeHistory(t, s.TC, models.BatchWorkflowID(id), "batchsync_cancel.json")
			writeLongestChild(t, s.TC, id, "channelsync_cancel.json")
		}

		out, code = s.starter(t, bin, "batch", "rejections", id, "-o", "json")
		require.Zero(t, code)
		require.Equal(t, c.Rejected, strings.Count(out, `"outcome": "rejected"`), "every rejection is listed")
	})

	t.Run("a terminated batch's waiting updates are closed by cancel", func(t *testing.T) {
		ms := sample.Batch(300, today, time.Now().Unix()+100, 13)
		id := "term-" + uuid.NewString()[:8]
		s.startBatch(t, models.BatchSyncInput{BatchID: id, Mutations: ms, Retry: models.DefaultRetryPolicy()})
		require.Eventually(t, func() bool { return storedTotal(t, st, id).Committed > 0 }, 2*time.Minute, 200*time.Millisecond)
		require.NoError(t, s.TC.TerminateWorkflow(context.Background(), models.BatchWorkflowID(id), "", "operator"))
		out, code := s.starter(t, bin, "batch", "cancel", id)
		require.Zero(t, code)
		require.Contains(t, out, "ended without closing its outcomes")
		// A push a dying child had in flight may still be acknowledged after this:
		// the update keeps its first outcome, so the count does not change.
		c := storedTotal(t, st, id)
		t.Logf("terminated, then closed: %+v", c)
		require.Equal(t, expectedUpdates(t, ms), c.Total, "every update has an outcome")
		require.Positive(t, c.Cancelled)
	})
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
