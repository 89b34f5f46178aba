package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/shopspring/decimal"
	"github.com/spf13/cobra"
	"github.com/stretchr/testify/require"

	"github.com/paritysync/paritysync/activities/store"
	"github.com/paritysync/paritysync/activities/store/storetest"
	"github.com/paritysync/paritysync/models"
	"github.com/paritysync/paritysync/ops"
)

// commands is every runnable command of the tree, help and completion aside.
func commands(root *cobra.Command) []*cobra.Command {
	var all []*cobra.Command
	var walk func(*cobra.Command)
	walk = func(cmd *cobra.Command) {
		for _, sub := range cmd.Commands() {
			walk(sub)
		}
		if cmd.Runnable() && !cmd.Hidden && cmd.Name() != "help" && cmd.Parent() != nil &&
			!strings.HasPrefix(cmd.CommandPath(), "starter completion") {
			all = append(all, cmd)
		}
	}
	walk(root)
	return all
}

func TestEveryCommandParsesItsFlagsAndOutputJSON(t *testing.T) {
	c := &cli{getenv: func(string) string { return "" }}
	cmds := commands(c.rootCmd())
	require.Greater(t, len(cmds), 20, "every command was visited")
	for _, cmd := range cmds {
		path := cmd.CommandPath()
		require.False(t, cmd.DisableFlagParsing, "%s parses its flags with cobra, so --help lists them", path)
		// Parse-level: a fresh tree, -o json among the command's own flags.
		fresh := (&cli{getenv: func(string) string { return "" }}).rootCmd()
		args := append(strings.Fields(strings.TrimPrefix(path, "starter")), "-o", "json")
		found, rest, err := fresh.Find(args)
		require.NoError(t, err, path)
		require.NoError(t, found.ParseFlags(rest), "%s accepts -o json", path)
		require.Equal(t, "json", found.Flag("output").Value.String(), path)
	}
}

func TestCompletionOfOutputAndChannels(t *testing.T) {
	env := map[string]string{}
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"__complete", "quota", "-o", ""}, []string{"table", "json"}},
		{[]string{"__complete", "quota", "--channel", ""}, []string{"booking_com", "expedia"}},
		{[]string{"__complete", "dlq", "replay", "--channel", ""}, []string{"expedia"}},
		{[]string{"__complete", "channel", "pause", ""}, []string{"booking_com", "expedia"}},
		{[]string{"__complete", "reconcile", "run", "--channel", "exp"}, []string{"expedia"}},
	} {
		code, out, errOut := runCLI(t, env, tc.args...)
		require.Equal(t, exitOK, code, "%v: %s", tc.args, errOut)
		for _, w := range tc.want {
			require.Contains(t, strings.Fields(out), w, "%v completes %s: %s", tc.args, w, out)
		}
	}
	// Channels come from the channel configuration the command reads.
	env["PARITYSYNC_CHANNELS_FILE"] = writeFile(t, "channels:\n  - slug: my_ota\n    rate_per_minute: 30\n    burst: 3\n")
	_, out, _ := runCLI(t, env, "__complete", "dlq", "list", "--channel", "")
	require.Contains(t, strings.Fields(out), "my_ota")
}

func TestUsageErrorsOfTheMovedCommands(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"reconcile", "schedule", "--cron", "not a cron"}, `--cron "not a cron"`},
		{[]string{"dlq", "replay"}, "--all"},
		{[]string{"dlq", "replay", "--wait"}, "--all"},
		{[]string{"dlq", "replay", "--all", "--channel", "expedia"}, "--all replays every open dead letter"},
		{[]string{"dlq", "replay", "--all", "--dry-run", "--wait"}, "--dry-run sends nothing"},
		{[]string{"dlq", "ack"}, "select entries"},
		{[]string{"dlq", "export", "--id", "x"}, `--id: "x" is not an entry id`},
		{[]string{"dlq", "export", "extra"}, "takes no arguments"},
		{[]string{"batch", "outcome", "b1"}, "mutation"},
		{[]string{"batch", "outcome", "b1", "--mutation", " "}, "--mutation"},
		{[]string{"batch", "rejections"}, "batch id"},
		{[]string{"batch", "cancel", "a", "b"}, "batch id"},
		{[]string{"batch", "rejections", "b1", "--json"}, "unknown flag: --json"},
	} {
		code, out, errOut := runCLI(t, nil, tc.args...)
		require.Equal(t, exitUsage, code, "%v: %s", tc.args, errOut)
		require.Contains(t, errOut, tc.want, "%v", tc.args)
		require.Contains(t, errOut, "--help' for usage", "%v", tc.args)
		require.Empty(t, out, "%v", tc.args)
	}
	// A valid expression passes the check (and then needs Temporal).
	require.NoError(t, checkCron("0 3 * * *"))
	require.NoError(t, checkCron("@every 6h"))
}

// storeEnv is an environment whose system of record is a migrated schema of the
// test's own.
func storeEnv(t *testing.T) (map[string]string, *store.Store) {
	t.Helper()
	url := storetest.Schema(t, "starter")
	st, err := store.Open(context.Background(), url)
	require.NoError(t, err)
	t.Cleanup(st.Close)
	require.NoError(t, st.Migrate(context.Background()))
	return map[string]string{"PARITYSYNC_DATABASE_URL": url}, st
}

func TestBatchOutcomeOfAnUnknownMutationExits66(t *testing.T) {
	env, st := storeEnv(t)
	ctx := context.Background()
	_, err := st.RecordOutcomes(ctx, "b-1", []store.MutationOutcome{
		{MutationID: "m1", Channel: "expedia", Outcome: models.OutcomeRejected, Reason: "currency: must be an active ISO 4217 code"}})
	require.NoError(t, err)

	code, out, errOut := runCLI(t, env, "batch", "outcome", "b-1", "--mutation", "nosuch")
	require.Equal(t, exitNotFound, code, errOut)
	require.Contains(t, errOut, "no outcome for mutation nosuch in batch b-1")
	require.Empty(t, out)

	code, out, errOut = runCLI(t, env, "batch", "outcome", "b-1", "--mutation", "m1", "-o", "json")
	require.Equal(t, exitOK, code, errOut)
	var got []store.MutationOutcome
	require.NoError(t, json.Unmarshal([]byte(out), &got), out)
	require.Len(t, got, 1)
	require.Equal(t, models.OutcomeRejected, got[0].Outcome)

	code, out, errOut = runCLI(t, env, "batch", "rejections", "batch/b-1")
	require.Equal(t, exitOK, code, errOut)
	require.Contains(t, out, "currency: must be an active ISO 4217 code")
	code, out, _ = runCLI(t, env, "batch", "rejections", "nosuch", "-o", "json")
	require.Equal(t, exitOK, code)
	require.JSONEq(t, "[]", out, "no rejections is an empty array, not null")
}

func TestDLQReplayDryRunSendsAndAcknowledgesNothing(t *testing.T) {
	env, st := storeEnv(t)
	ctx := context.Background()
	amount := decimal.RequireFromString("99")
	m := models.Mutation{ID: "m7", PropertyID: "prop_0000abcd", RoomTypeCode: "DBL", RatePlanCode: "BAR", Channel: "expedia",
		StayDate: models.DateOf(time.Now().AddDate(0, 0, 30)), Values: models.Values{Amount: &amount, Currency: "EUR"}, Version: 1}
	co := models.Coalesce([]models.Mutation{m}, nil)
	require.Len(t, co.Requests, 1)
	id, _, err := st.ParkDeadLetter(ctx, store.DeadLetter{BatchID: "b-9", Reason: models.ReasonRejected, Status: 400,
		Message: "rate plan unknown", Request: co.Requests[0]})
	require.NoError(t, err)
	// No Temporal is reachable: a dry run never needs it.
	env["TEMPORAL_ADDRESS"] = "127.0.0.1:1"

	code, out, errOut := runCLI(t, env, "dlq", "replay", "--all", "--dry-run")
	require.Equal(t, exitOK, code, errOut)
	require.Contains(t, out, "would replay 1 entries (1 updates)")
	require.Contains(t, out, "rate plan unknown")

	code, out, errOut = runCLI(t, env, "dlq", "replay", "--batch", "b-9", "--dry-run", "-o", "json")
	require.Equal(t, exitOK, code, errOut)
	var got replayed
	require.NoError(t, json.Unmarshal([]byte(out), &got), out)
	require.True(t, got.DryRun)
	require.Equal(t, []int64{id}, got.IDs)
	require.Empty(t, got.BatchID, "nothing started")

	d, err := st.DeadLetter(ctx, id)
	require.NoError(t, err)
	require.True(t, d.AckedAt.IsZero(), "a dry run acknowledges nothing")

	code, out, errOut = runCLI(t, env, "dlq", "export", "-o", "json")
	require.Equal(t, exitOK, code, errOut)
	require.Equal(t, 1, strings.Count(out, "\n"), "JSON lines, one entry a line: %s", out)

	code, out, errOut = runCLI(t, env, "dlq", "ack", "--id", "", "--batch", "b-9", "--note", "fixed", "-o", "json")
	require.Equal(t, exitOK, code, errOut)
	require.JSONEq(t, `{"acknowledged":1,"ids":[`+jsonInt(id)+`]}`, out)
}

func jsonInt(n int64) string {
	b, _ := json.Marshal(n)
	return string(b)
}

func TestBatchStatusCountsAlikeInTableAndJSON(t *testing.T) {
	// The batch's own counts leave out the 4 mutations it rejected; the store
	// holds their outcomes.
	stored := []models.ChannelCounts{{Channel: "expedia", Total: 401, Committed: 390, Superseded: 7, Rejected: 4}}
	live := &models.BatchStatus{Done: true, Channels: []models.ChannelCounts{
		{Channel: "expedia", Total: 397, Committed: 390, Superseded: 7, Requests: 12}}}
	rep := statusReport{WorkflowID: "batch/b-1", State: "done", Done: true, Channels: ops.ResultCounts(stored, live)}
	rep.Totals = models.BatchStatus{Channels: rep.Channels}.Totals()
	require.Equal(t, []models.ChannelCounts{{Channel: "expedia", Total: 401, Committed: 390, Superseded: 7, Rejected: 4, Requests: 12}},
		rep.Channels)

	var table, js strings.Builder
	(&cli{stdout: &table, stderr: &table}).statusTable(rep, "paritysync")
	require.NoError(t, (&cli{stdout: &js}).writeJSON(rep))
	var back statusReport
	require.NoError(t, json.Unmarshal([]byte(js.String()), &back))
	require.Equal(t, rep.Channels, back.Channels)
	require.True(t, back.Done, "a finished batch is done in JSON")
	row := strings.Fields(strings.Split(table.String(), "\n")[2])
	require.Equal(t, []string{"expedia", "401", "390", "7", "4", "0", "0", "0", "12"}, row, table.String())

	require.Equal(t, exitReported, exitCode(statusVerdict(rep)), "rejections exit 3, in either form")
	rep.Done, rep.State = false, "running"
	require.NoError(t, statusVerdict(rep), "a running batch's counts are not final: 0")
	clean := statusReport{Done: true, Channels: []models.ChannelCounts{{Channel: "expedia", Total: 3, Committed: 3}}}
	require.NoError(t, statusVerdict(clean))
	// Without a worker's answer the store's outcomes are the counts.
	require.Equal(t, stored, ops.ResultCounts(stored, nil))
}

// TestStatusWithNothingReachableExits69AfterPrintingWhatItKnows holds status to the
// contract: data on stdout (valid JSON even when no source answers), the failures
// on stderr without a password, and 69, never a 0–3 result, when a source is down.
func TestStatusWithNothingReachableExits69AfterPrintingWhatItKnows(t *testing.T) {
	env := map[string]string{
		"REDIS_URL":               "redis://:hunter2@127.0.0.1:1/0?dial_timeout=300ms",
		"TEMPORAL_ADDRESS":        "127.0.0.1:1",
		"PARITYSYNC_DATABASE_URL": "postgres://ps:hunter2@127.0.0.1:1/paritysync?connect_timeout=1",
	}
	code, out, errOut := runCLI(t, env, "status", "-o", "json")
	require.Equal(t, exitUnavailable, code, errOut)
	var v statusView
	require.NoError(t, json.Unmarshal([]byte(out), &v), out)
	require.Len(t, v.Channels, len(models.DefaultChannels()), "every configured channel, state unknown")
	require.Empty(t, v.Workers)
	require.Contains(t, errOut, "redis at redis://:xxxxx@127.0.0.1:1/0")
	require.Contains(t, errOut, "postgres at postgres://ps:xxxxx@127.0.0.1:1/paritysync")
	require.NotContains(t, errOut, "hunter2")
}
