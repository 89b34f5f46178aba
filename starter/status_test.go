package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/paritysync/paritysync/activities/store"
	"github.com/paritysync/paritysync/limiter"
	"github.com/paritysync/paritysync/models"
	"github.com/paritysync/paritysync/ops"
)

func TestStatusExitIsTheWorstState(t *testing.T) {
	workers := []pollerRow{{Identity: "w1", Kind: "workflow"}, {Identity: "w1", Kind: "activity"}}
	ch := func(mod func(*channelView)) channelView {
		cv := channelView{quotaRow: quotaRow{QuotaRow: ops.QuotaRow{Channel: "expedia", Tier: limiter.TierOK,
			Breaker: limiter.BreakerClosed}}, State: stateOK}
		mod(&cv)
		return cv
	}
	for _, tc := range []struct {
		name    string
		workers []pollerRow
		known   bool
		channel channelView
		exit    int
		problem string
	}{
		{"all well", workers, true, ch(func(*channelView) {}), exitOK, ""},
		{"paused", workers, true, ch(func(c *channelView) { c.Paused = "rate dispute" }), exitWarn, "warn: expedia paused: rate dispute"},
		{"back-off", workers, true, ch(func(c *channelView) { c.BackoffSeconds = 20 }), exitWarn, "backing off for 20s"},
		{"dead letters", workers, true, ch(func(c *channelView) { c.OpenDeadLetters = 2 }), exitWarn, "2 open dead letters"},
		{"lag", workers, true, ch(func(c *channelView) { c.OldestSeconds, c.PendingUpdates = 700, 5 }), exitWarn,
			"parity lag: a change accepted 11m40s ago is not acknowledged yet (5 updates owed)"},
		{"lag under the threshold", workers, true, ch(func(c *channelView) { c.OldestSeconds = 500 }), exitOK, ""},
		{"no activity worker", workers[:1], true, ch(func(*channelView) {}), exitPage, "no worker polls task queue q for activity tasks"},
		{"workers unknown", nil, false, ch(func(*channelView) {}), exitOK, ""},
		{"breaker", workers, true, ch(func(c *channelView) { c.Breaker = limiter.BreakerOpen }), exitPage, "circuit breaker open"},
		{"quota page", workers, true, ch(func(c *channelView) { c.Tier, c.UsedPercent = limiter.TierPage, 86 }), exitPage, "86.0 %"},
		{"quota throttle", workers, true, ch(func(c *channelView) { c.Tier = limiter.TierThrottle; c.Paused = "x" }), exitThrottle, "critical"},
		{"family stopped", workers, true, ch(func(c *channelView) {
			c.Stopped = []ops.FamilyStop{{Family: models.FamilyRates, Until: time.Now()}}
		}), exitThrottle, "rates stopped by quota_exhausted"},
	} {
		v := statusView{TaskQueue: "q", State: stateOK, Workers: tc.workers, Channels: []channelView{tc.channel}}
		judge(&v, tc.known)
		require.Equal(t, tc.exit, v.Exit, "%s: %v", tc.name, v.Problems)
		if tc.problem == "" {
			require.Empty(t, v.Problems, tc.name)
		} else {
			require.Contains(t, strings.Join(v.Problems, "\n"), tc.problem, tc.name)
		}
	}
}

// statusJSON runs starter status -o json.
func statusJSON(t *testing.T, env map[string]string, args ...string) (int, statusView) {
	t.Helper()
	code, out, errOut := runCLI(t, env, append([]string{"status", "-o", "json"}, args...)...)
	var v statusView
	require.NoError(t, json.Unmarshal([]byte(out), &v), "%s\n%s", out, errOut)
	return code, v
}

// TestStatusOfARunningStack: with a worker polling, a paused channel, a batch
// waiting on it and a dead letter, status shows each, in the table and in JSON
// alike, and exits 1 (warn); the channel's parity lag rises while it is paused,
// and so does a property's (--property: its owed cells and their age), back to
// none after the resume.
func TestStatusOfARunningStack(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: needs a Temporal dev server")
	}
	env := workerEnv(t, 60)
	ctx := context.Background()
	st, err := store.Open(ctx, env["PARITYSYNC_DATABASE_URL"])
	require.NoError(t, err)
	defer st.Close()

	code, v := statusJSON(t, env)
	require.Equal(t, exitOK, code, "%v", v.Problems)
	require.GreaterOrEqual(t, distinctWorkers(v.Workers), 1, "the test's worker polls: %+v", v.Workers)
	require.Len(t, v.Channels, len(models.DefaultChannels()), "every configured channel")

	code, _, errOut := runCLI(t, env, "channel", "pause", "expedia", "--reason", "rate dispute")
	require.Equal(t, exitOK, code, errOut)
	day := models.DateOf(time.Now().UTC().AddDate(0, 0, 7)).String()
	var b strings.Builder
	for i := range 4 {
		fmt.Fprintf(&b, `{"id":"s-%d","property_id":"prop_%08x","room_type_code":"R%d","rate_plan_code":"BAR","channel":"expedia","stay_date":%q,"inventory":%d,"version":1}`+"\n",
			i, 0xabcd00+i, i, day, i)
	}
	file := filepath.Join(t.TempDir(), "batch.jsonl")
	require.NoError(t, os.WriteFile(file, []byte(b.String()), 0o600))
	code, _, errOut = runCLI(t, env, "batch", "start", "--file", file, "--id", "status-1")
	require.Equal(t, exitOK, code, errOut)
	m := models.Mutation{ID: "dl-1", PropertyID: "prop_0000abcd", RoomTypeCode: "DBL", RatePlanCode: "BAR", Channel: "agoda",
		StayDate: models.DateOf(time.Now().AddDate(0, 0, 30)), Values: models.Values{Inventory: ptrInt(3)}, Version: 1}
	co := models.Coalesce([]models.Mutation{m}, nil)
	_, _, err = st.ParkDeadLetter(ctx, store.DeadLetter{BatchID: "b-dl", Reason: models.ReasonRejected, Status: 400,
		Message: "room unknown", Request: co.Requests[0]})
	require.NoError(t, err)

	var first channelView
	require.Eventually(t, func() bool {
		code, v = statusJSON(t, env)
		first = channelOf(v, "expedia")
		return len(v.Batches) == 1 && v.Batches[0].Planned && first.OldestSeconds >= 1
	}, time.Minute, 500*time.Millisecond, "the batch runs and owes expedia its updates: %+v", v)
	require.Equal(t, exitWarn, code, "%v", v.Problems)
	require.Equal(t, "status-1", v.Batches[0].BatchID)
	require.Equal(t, 4, v.Batches[0].Total)
	require.Equal(t, "rate dispute", first.Paused)
	require.Equal(t, stateWarn, first.State)
	require.Equal(t, 4, first.PendingUpdates)
	require.Equal(t, 1, v.OpenDeadLetters)
	require.Equal(t, 1, channelOf(v, "agoda").OpenDeadLetters)
	require.Contains(t, v.Problems, "warn: expedia paused: rate dispute")
	time.Sleep(2 * time.Second)
	_, v = statusJSON(t, env)
	require.Greater(t, channelOf(v, "expedia").OldestSeconds, first.OldestSeconds+1.5, "the lag rises while paused")
	_, pv := statusJSON(t, env, "--property", "prop_00abcd01")
	p := channelOf(pv, "expedia")
	require.Equal(t, "prop_00abcd01", p.Property)
	require.Equal(t, 1, p.OwedCells, "its one cell is owed: %+v", p)
	require.GreaterOrEqual(t, p.OldestSeconds, 2.0, "since the batch recorded it: %+v", p)
	require.Zero(t, channelOf(pv, "agoda").OwedCells, "a channel the property has no change for owes none")

	code, out, errOut := runCLI(t, env, "status")
	require.Equal(t, exitWarn, code, errOut)
	t.Logf("starter status printed:\n%s", out)
	require.Contains(t, out, "state warn: ")
	require.Contains(t, out, "problem: warn: expedia paused: rate dispute")
	require.Contains(t, out, "status-1")
	require.Contains(t, out, "problem: warn: agoda 1 open dead letters")

	code, _, errOut = runCLI(t, env, "channel", "resume", "expedia")
	require.Equal(t, exitOK, code, errOut)
	require.Eventually(t, func() bool {
		_, v = statusJSON(t, env)
		return len(v.Batches) == 0
	}, time.Minute, 500*time.Millisecond, "the batch ends after the resume")
	e := channelOf(v, "expedia")
	require.Zero(t, e.OldestSeconds)
	_, pv = statusJSON(t, env, "--property", "prop_00abcd01")
	p = channelOf(pv, "expedia")
	require.Zero(t, p.OwedCells, "the property is in parity after the resume: %+v", p)
	require.Zero(t, p.OldestSeconds)
	require.Equal(t, 1, p.AckedUpdates)
	require.Equal(t, 4, e.AckedUpdates)
	require.GreaterOrEqual(t, e.P50Seconds, 3.0, "the acknowledgements waited out the pause")
}

func channelOf(v statusView, slug string) channelView {
	for _, c := range v.Channels {
		if c.Channel == slug {
			return c
		}
	}
	return channelView{}
}

func ptrInt(n int) *int { return &n }
