package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"

	"github.com/paritysync/paritysync/dial/redistest"
	"github.com/paritysync/paritysync/models"
)

func writeFile(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "batch.json")
	require.NoError(t, os.WriteFile(path, []byte(body), 0o600))
	return path
}

const goodLine = `{"id":"m1","property_id":"prop_1a2b3c4d","room_type_code":"DLXKING","rate_plan_code":"BAR_FLEX","channel":"expedia","stay_date":"2030-01-02","amount":"129.90","currency":"EUR","version":3}`

func TestReadMutationsAcceptsArrayAndLines(t *testing.T) {
	for name, body := range map[string]string{
		"array": "[\n" + goodLine + ",\n" + strings.Replace(goodLine, `"m1"`, `"m2"`, 1) + "\n]\n",
		"lines": goodLine + "\n\n" + strings.Replace(goodLine, `"m1"`, `"m2"`, 1) + "\n",
	} {
		t.Run(name, func(t *testing.T) {
			ms, err := readMutations(writeFile(t, body))
			require.NoError(t, err)
			require.Len(t, ms, 2)
			require.Equal(t, "m2", ms[1].ID)
			require.Equal(t, "129.9", ms[0].Amount.String())
			require.Equal(t, int64(3), ms[0].Version)
		})
	}
}

func TestReadMutationsNamesFileLineAndProblem(t *testing.T) {
	for _, tc := range []struct {
		name, body, want string
	}{
		{"syntax error in an array", "[\n" + goodLine + ",\n{\"id\": }\n]", "line 3: invalid character '}'"},
		{"wrong type in an array", "[\n" + goodLine + ",\n" + strings.Replace(goodLine, `"version":3`, `"version":"x"`, 1) + "\n]", "line 3: field version: want integer, got string"},
		{"unknown field on a line", goodLine + "\n" + strings.Replace(goodLine, `"amount"`, `"amout"`, 1), `line 2: unknown field "amout"`},
		{"bad date on a line", strings.Replace(goodLine, "2030-01-02", "02/01/2030", 1), `line 1: date "02/01/2030": want YYYY-MM-DD`},
		{"two values on a line", goodLine + " " + goodLine, "line 1: more than one JSON value"},
		{"empty file", "  \n", "no mutations"},
		{"empty array", "[]", "no mutations"},
		{"]garbage after the array", "[" + goodLine + "]]garbage", "line 1: data after the JSON array: ]garbage"},
		{"a word after the array", "[\n" + goodLine + "\n]\n x", "line 4: data after the JSON array: x"},
		{"not UTF-8", goodLine + "\n" + strings.Replace(goodLine, "BAR_FLEX", "BAR_\xe9", 1), "line 2: byte 0xe9 is not UTF-8"},
		{"every bad row named", goodLine + "\nnull\n" + strings.Replace(goodLine, `"m1"`, `"m2"`, 1) + "\n" + goodLine,
			"line 2: want a JSON object, got null; line 4: id \"m1\" is already used by the row at index 0, line 1 (2 of 4 rows refused, nothing started)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := writeFile(t, tc.body)
			_, err := readMutations(path)
			require.Error(t, err)
			require.Contains(t, err.Error(), path)
			require.Contains(t, err.Error(), tc.want)
			require.NotContains(t, err.Error(), "\n", "one line")
		})
	}
}

func TestReadMutationsAcceptsBOMAndCRLF(t *testing.T) {
	second := strings.Replace(goodLine, `"m1"`, `"m2"`, 1)
	for name, body := range map[string]string{
		"BOM and lines": "\xef\xbb\xbf" + goodLine + "\r\n" + second + "\r\n",
		"BOM and array": "\xef\xbb\xbf[\r\n" + goodLine + ",\r\n" + second + "\r\n]\r\n",
	} {
		t.Run(name, func(t *testing.T) {
			ms, err := readMutations(writeFile(t, body))
			require.NoError(t, err)
			require.Equal(t, []string{"m1", "m2"}, []string{ms[0].ID, ms[1].ID})
		})
	}
}

func TestReadMutationsNamesEveryBadRow(t *testing.T) {
	var b strings.Builder
	for i := range 30 {
		bad := strings.Replace(goodLine, `"version":3`, fmt.Sprintf(`"version":"%d"`, i), 1)
		fmt.Fprintln(&b, strings.Replace(bad, `"m1"`, fmt.Sprintf(`"m%d"`, i), 1))
	}
	_, err := readMutations(writeFile(t, b.String()))
	require.Error(t, err)
	require.Contains(t, err.Error(), "line 20: field version: want integer, got string; 10 more problems on lines 21, 22, 23, 24, 25, 26, 27, 28, 29, 30 (30 of 30 rows refused")
}

// runCLI runs one command line with env as the whole environment.
func runCLI(t *testing.T, env map[string]string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = run(context.Background(), args, &out, &errOut, func(k string) string { return env[k] })
	return code, out.String(), errOut.String()
}

func TestBatchStartRefusesMalformedFileBeforeConnecting(t *testing.T) {
	path := writeFile(t, "[{\"id\": ]")
	// An unreachable Temporal proves nothing was started: the file is read first.
	env := map[string]string{"TEMPORAL_ADDRESS": "127.0.0.1:1", "REDIS_URL": "redis://127.0.0.1:1/0"}
	code, out, errOut := runCLI(t, env, "batch", "start", "--file", path)
	require.Equal(t, exitData, code)
	require.Equal(t, 1, strings.Count(errOut, "\n"), errOut)
	require.Contains(t, errOut, path+" line 1:")
	require.Empty(t, out)
}

func TestUsageErrorsExit64AndPointAtHelp(t *testing.T) {
	for _, args := range [][]string{nil, {"bogus"}, {"batch"}, {"batch", "start"}, {"batch", "nope"},
		{"channel", "pause", "expedia"}, {"batch", "status"}, {"quota", "--bogus"}, {"quota", "extra"},
		{"quota", "--output", "yaml"}, {"dlq", "list", "--count", "0"}, {"retry-after"}, {"smooth"}} {
		code, out, errOut := runCLI(t, nil, args...)
		require.Equal(t, exitUsage, code, "%v: %s", args, errOut)
		require.Contains(t, errOut, "--help' for usage", "%v", args)
		require.Empty(t, out, "%v: usage errors go to stderr", args)
	}
}

func TestHelpOfEveryCommandListsEveryFlag(t *testing.T) {
	c := &cli{getenv: func(string) string { return "" }}
	var walk func(cmd *cobra.Command)
	n := 0
	walk = func(cmd *cobra.Command) {
		for _, sub := range cmd.Commands() {
			walk(sub)
		}
		if cmd.Hidden {
			return
		}
		n++
		args := append(strings.Fields(strings.TrimPrefix(cmd.CommandPath(), "starter")), "--help")
		code, out, errOut := runCLI(t, nil, args...)
		require.Equal(t, exitOK, code, "%v: %s", args, errOut)
		require.Empty(t, errOut, "%v", args)
		require.Contains(t, out, "Usage:", "%v", args)
		cmd.Flags().VisitAll(func(f *pflag.Flag) {
			require.Contains(t, out, "--"+f.Name, "%v lists --%s", args, f.Name)
		})
		require.Contains(t, out, "--output", "%v lists the global --output", args)
	}
	walk(c.rootCmd())
	require.Greater(t, n, 12, "every command and subcommand was visited")
	_, out, _ := runCLI(t, nil, "--help")
	require.Contains(t, out, "Exit status:", "the root help documents the exit statuses")
}

func TestVersionAndCompletion(t *testing.T) {
	code, out, _ := runCLI(t, nil, "--version")
	require.Equal(t, exitOK, code)
	require.Contains(t, out, "starter version ")
	for _, shell := range []string{"bash", "zsh", "fish", "powershell"} {
		code, out, errOut := runCLI(t, nil, "completion", shell)
		require.Equal(t, exitOK, code, errOut)
		require.Contains(t, out, "starter", shell)
	}
}

func TestUnreachableRedisIsOneLineAndExit69(t *testing.T) {
	env := map[string]string{"REDIS_URL": "redis://:hunter2@127.0.0.1:1/0?dial_timeout=300ms"}
	code, out, errOut := runCLI(t, env, "quota")
	require.Equal(t, exitUnavailable, code)
	require.Equal(t, 1, strings.Count(errOut, "\n"), "one line, no pool noise: %q", errOut)
	require.Contains(t, errOut, "redis at redis://:xxxxx@127.0.0.1:1/0")
	require.NotContains(t, errOut, "hunter2")
	require.Empty(t, out)
}

func TestUnreachableDatabaseIsExit69WithoutItsPassword(t *testing.T) {
	env := map[string]string{"PARITYSYNC_DATABASE_URL": "postgres://ps:hunter2@127.0.0.1:1/paritysync?connect_timeout=1"}
	code, out, errOut := runCLI(t, env, "dlq", "list")
	require.Equal(t, exitUnavailable, code, errOut)
	require.Contains(t, errOut, "postgres at postgres://ps:xxxxx@127.0.0.1:1/paritysync")
	require.NotContains(t, errOut, "hunter2")
	require.Empty(t, out)
}

func TestConfigErrorExit78NamesTheVariable(t *testing.T) {
	code, _, errOut := runCLI(t, map[string]string{"PARITYSYNC_HTTP_TIMEOUT": "soon"}, "quota")
	require.Equal(t, exitConfig, code)
	require.Contains(t, errOut, "PARITYSYNC_HTTP_TIMEOUT: must be a positive duration")
	code, _, errOut = runCLI(t, map[string]string{"PARITYSYNC_PROPERTY_ZONES": "prop_0000aaaa=Mars/Base"}, "dlq", "list")
	require.Equal(t, exitConfig, code)
	require.Contains(t, errOut, `PARITYSYNC_PROPERTY_ZONES: entry "prop_0000aaaa=Mars/Base"`)
}

func TestSummaryExitStatus(t *testing.T) {
	var out bytes.Buffer
	c := &cli{stdout: &out, stderr: &out}
	clean := models.BatchStatus{Done: true, Channels: []models.ChannelCounts{{Channel: "expedia", Total: 5, Committed: 4, Superseded: 1}}}
	require.NoError(t, c.summary(clean))
	require.Contains(t, out.String(), "expedia")

	rejected := models.BatchStatus{Done: true, Channels: []models.ChannelCounts{{Channel: "expedia", Total: 5, Committed: 4, Rejected: 1}},
		Rejected: []models.Rejection{{MutationID: "m9", Channel: "expedia", Problems: []models.FieldError{{Field: "currency", Rule: "must be an active ISO 4217 code"}}}}}
	out.Reset()
	require.ErrorIs(t, c.summary(rejected), errReported)
	require.Equal(t, exitReported, exitCode(c.summary(rejected)))
	require.Contains(t, out.String(), "rejected m9 (expedia): currency: must be an active ISO 4217 code")

	lost := models.BatchStatus{Done: true, Channels: []models.ChannelCounts{{Channel: "agoda", Total: 5, Committed: 4}}}
	out.Reset()
	require.ErrorIs(t, c.summary(lost), errReported)
	require.Contains(t, out.String(), "1 updates without an outcome")
}

// blockedFollow follows a batch that ends only when its context does.
func blockedFollow(ctx context.Context) (models.BatchStatus, error) {
	<-ctx.Done()
	return models.BatchStatus{}, ctx.Err()
}

func TestInterruptDuringWaitSaysTheBatchGoesOn(t *testing.T) {
	var out, errOut bytes.Buffer
	c := &cli{stdout: &out, stderr: &errOut}
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel) // Ctrl-C
	_, err := c.followBatch(ctx, blockedFollow, "b-42", "http://ui/b-42")
	require.Error(t, err)
	require.Equal(t, exitInterrupted, exitCode(err))
	require.Contains(t, err.Error(), "batch b-42 keeps running on the workers")
	require.Contains(t, err.Error(), "starter batch status b-42")
	require.Contains(t, err.Error(), "http://ui/b-42")
	require.NotContains(t, err.Error(), "context canceled")
}

func TestRetryAfter(t *testing.T) {
	now := "2026-05-09T17:00:00Z"
	code, out, _ := runCLI(t, nil, "retry-after", "30", "--now", now, "-o", "json")
	require.Equal(t, exitOK, code)
	var r retryAfterResult
	require.NoError(t, json.Unmarshal([]byte(out), &r))
	require.True(t, r.Usable)
	require.Equal(t, 30.0, r.WaitSeconds)
	require.Equal(t, "2026-05-09T17:00:30Z", r.WakeUp.Format(time.RFC3339))

	code, out, _ = runCLI(t, nil, "retry-after", "Sat, 09 May 2026 17:01:30 GMT", "--now", now, "-o", "json")
	require.Equal(t, exitOK, code)
	require.NoError(t, json.Unmarshal([]byte(out), &r))
	require.Equal(t, 90.0, r.WaitSeconds)
	require.False(t, r.Capped)

	code, out, _ = runCLI(t, nil, "retry-after", "86400", "--now", now, "-o", "json")
	require.Equal(t, exitOK, code)
	require.NoError(t, json.Unmarshal([]byte(out), &r))
	require.Equal(t, 120.0, r.WaitSeconds, "capped at the default --max of 120s, as the quota guide does")
	require.True(t, r.Capped)

	code, out, _ = runCLI(t, nil, "retry-after", "86400", "--channel", "expedia", "--now", now)
	require.Equal(t, exitOK, code)
	require.Contains(t, out, "5m0s", "capped at the channel's max_retry_after")

	code, out, errOut := runCLI(t, nil, "retry-after", "--now", now, "--", "-5")
	require.Equal(t, exitData, code, "a negative value is not usable")
	require.Empty(t, out)
	require.Contains(t, errOut, "falls back to its own backoff")
}

const changesHeader = "id,property_id,room_type_code,rate_plan_code,channel,stay_date,amount,currency,stop_sell,version,priority\n"

func TestSmoothPlansBurstThenRefillRate(t *testing.T) {
	// 30 changes for 30 properties: 30 rates requests on expedia (60/min, burst 6),
	// timed by the limiter: the burst at once, then one per (60 s + margin) / 60.
	var b strings.Builder
	b.WriteString(changesHeader)
	day := models.DateOf(time.Now()).AddDays(3)
	for i := range 30 {
		fmt.Fprintf(&b, "m%d,prop_%08x,DLXKING,BAR_FLEX,expedia,%s,129.90,EUR,,1,\n", i, i, day)
	}
	b.WriteString("bad,prop_00000001,DLXKING,BAR_FLEX,expedia,2001-01-01,10,EUR,,1,\n")
	b.WriteString("urgent,prop_000000ff,DLXKING,BAR_FLEX,expedia," + day.String() + ",,,true,1,1\n")
	path := filepath.Join(t.TempDir(), "changes.csv")
	require.NoError(t, os.WriteFile(path, []byte(b.String()), 0o600))

	env := map[string]string{"REDIS_URL": redistest.Reachable(t)}
	// --speed 6: a plan's 30 s replay in 5 s, so a busy machine's lateness (the
	// tolerance below is 83 ms of real time) does not show as a late plan.
	code, out, errOut := runCLI(t, env, "smooth", "--csv", path, "--speed", "6", "-o", "json")
	require.Equal(t, exitOK, code, errOut)
	var plans []channelPlan
	require.NoError(t, json.Unmarshal([]byte(out), &plans))
	require.Len(t, plans, 1)
	p := plans[0]
	require.Equal(t, "expedia", p.Channel)
	require.Equal(t, 32, p.Mutations)
	require.Len(t, p.Rejected, 1)
	require.Equal(t, "bad", p.Rejected[0].MutationID)
	require.Equal(t, 31, p.Requests, "30 rates requests and one restrictions request")
	require.Equal(t, 1, p.Sends[0].Priority, "the urgent stop-sell goes first")
	require.Equal(t, models.FamilyRestrictions, p.Sends[0].Family)

	cfg := models.ChannelMap(models.DefaultChannels())["expedia"]
	// The replay runs 6 times faster than real time: a millisecond of lateness
	// is 6 ms of plan, hence the tolerances.
	const late = 0.5
	burst := cfg.Burst
	for i := range burst {
		require.Less(t, p.Sends[i].AtSeconds, late, "the first %d go out at once (the burst)", burst)
	}
	gap := (cfg.WindowLength() + simMargin).Seconds() / float64(cfg.RatePerMinute)
	var rates []plannedSend
	for _, s := range p.Sends {
		if s.Family == models.FamilyRates {
			rates = append(rates, s)
		}
	}
	require.Len(t, rates, 30)
	// The urgent restrictions request took one place of the burst.
	require.InDelta(t, gap, rates[burst-1].AtSeconds, late, "then one per interval")
	require.InDelta(t, float64(31-burst)*gap, rates[29].AtSeconds, late)
	require.InDelta(t, rates[29].AtSeconds, p.FinishesSeconds, 0.001)

	code, out, _ = runCLI(t, env, "smooth", "--csv", path, "--window", "10m", "--speed", "600")
	require.Equal(t, exitOK, code)
	require.Contains(t, out, "expedia: 32 mutations in 1 batches -> 31 requests (1 rejected, 0 superseded)")
	require.Contains(t, out, "rejected bad: stay_date: "+models.RuleNotPast)
}

func TestSmoothNamesLineAndColumn(t *testing.T) {
	path := filepath.Join(t.TempDir(), "changes.csv")
	require.NoError(t, os.WriteFile(path, []byte(changesHeader+"m1,prop_00000001,DLXKING,BAR_FLEX,expedia,2030-01-01,10,EUR,maybe,1,\n"), 0o600))
	code, _, errOut := runCLI(t, nil, "smooth", "--csv", path)
	require.Equal(t, exitData, code)
	require.Contains(t, errOut, path+" line 2: column stop_sell: want true or false")

	require.NoError(t, os.WriteFile(path, []byte("id,colour\nm1,red\n"), 0o600))
	code, _, errOut = runCLI(t, nil, "smooth", "--csv", path)
	require.Equal(t, exitData, code)
	require.Contains(t, errOut, `line 2: unknown column "colour"`)
}

func TestSampleWritesValidJSONLines(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.jsonl")
	code, _, errOut := runCLI(t, nil, "sample", "--mutations", "200", "--out", path)
	require.Equal(t, exitOK, code, errOut)
	ms, err := readMutations(path)
	require.NoError(t, err)
	require.Len(t, ms, 200)
}

func TestSmootherRefusalIsNotAnError(t *testing.T) {
	full := temporal.NewApplicationError("smoother expedia is full (5000 waiting, at most 5000): retry later", models.ErrSmootherFull)
	err := submitError(fmt.Errorf("submit 3 mutations to smoother/expedia: %w", full))
	require.Equal(t, exitRefused, exitCode(err))
	require.Contains(t, err.Error(), "retry later")
	other := submitError(fmt.Errorf("submit: %w", temporal.NewApplicationError("boom", "Other")))
	require.Equal(t, exitError, exitCode(other))
	require.NotEqual(t, exitCode(err), exitCode(other))
}
