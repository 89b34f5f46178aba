package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/interceptor"

	"github.com/paritysync/paritysync/dial/devtest"
	"github.com/paritysync/paritysync/e2e/stack"
	"github.com/paritysync/paritysync/models"
	"github.com/paritysync/paritysync/ops"
)

// TestMain stops the package's one dev server (devtest) after the tests.
func TestMain(m *testing.M) { devtest.Main(m) }

// callCounter counts the workflow queries and starts of the client it wraps.
type callCounter struct {
	interceptor.ClientInterceptorBase
	queries, starts atomic.Int32
}

func (c *callCounter) InterceptClient(next interceptor.ClientOutboundInterceptor) interceptor.ClientOutboundInterceptor {
	return &countingOutbound{ClientOutboundInterceptorBase: interceptor.ClientOutboundInterceptorBase{Next: next}, c: c}
}

type countingOutbound struct {
	interceptor.ClientOutboundInterceptorBase
	c *callCounter
}

func (o *countingOutbound) QueryWorkflow(ctx context.Context, in *interceptor.ClientQueryWorkflowInput) (converter.EncodedValue, error) {
	o.c.queries.Add(1)
	return o.Next.QueryWorkflow(ctx, in)
}

func (o *countingOutbound) ExecuteWorkflow(ctx context.Context, in *interceptor.ClientExecuteWorkflowInput) (client.WorkflowRun, error) {
	o.c.starts.Add(1)
	return o.Next.ExecuteWorkflow(ctx, in)
}

// runCounted runs one command line as runCLI does, its Temporal client wrapped by
// counter.
func runCounted(t *testing.T, counter *callCounter, env map[string]string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	c := &cli{stdout: &out, stderr: &errOut, getenv: func(k string) string { return env[k] },
		interceptors: []interceptor.ClientInterceptor{counter}}
	root := c.rootCmd()
	root.SetArgs(args)
	root.SetOut(&out)
	root.SetErr(&errOut)
	return exitCode(root.ExecuteContext(context.Background())), out.String(), errOut.String()
}

// workerEnv runs a worker over the simulator on the test's namespace, task queue,
// key prefix and schema (the harness, e2e/stack), every channel allowing
// ratePerMinute requests a minute, and returns the environment the starter reads
// them from.
func workerEnv(t *testing.T, ratePerMinute int) map[string]string {
	t.Helper()
	s := stack.Start(t, "starter", devtest.Start(t), stack.Options{Env: stack.EveryChannel(ratePerMinute)})
	return maps.Clone(s.Env)
}

// progressLineRE is a --wait progress line: time, channel, done/total (pct) rate/s ETA.
var progressLineRE = regexp.MustCompile(`^\d\d:\d\d:\d\d (\S+) +(\d+)/(\d+) \((\d+\.\d)%\) (\d+\.\d)/s ETA (\S+)$`)

// TestWaitFollowsFromTheStoreWithoutQueries runs a batch with --wait and checks
// that following it sent the workflow no query, that the progress lines have the
// done/total (pct) rate/s ETA form and end at every update, that batch status (and a
// re-attached follow) count as --wait did, and that the summary names the
// rejections it did not list and the command listing them.
func TestWaitFollowsFromTheStoreWithoutQueries(t *testing.T) {
	env := workerEnv(t, 60)
	day := models.DateOf(time.Now().UTC().AddDate(0, 0, 7)).String()
	var b strings.Builder
	for i := range 12 { // distinct properties: 12 requests, no coalescing
		fmt.Fprintf(&b, `{"id":"ok-%d","property_id":"prop_%08x","room_type_code":"R%d","rate_plan_code":"BAR","channel":"expedia","stay_date":%q,"inventory":%d,"version":1}`+"\n",
			i, 0xabcd00+i, i, day, i%5)
	}
	for i := range 55 { // more than the plan lists
		fmt.Fprintf(&b, `{"id":"bad-%d","property_id":"prop_0000abcd","room_type_code":"DBL","rate_plan_code":"BAR","channel":"expedia","stay_date":%q,"amount":"10.999","currency":"EUR","version":1}`+"\n",
			i, day)
	}
	file := filepath.Join(t.TempDir(), "batch.jsonl")
	require.NoError(t, os.WriteFile(file, []byte(b.String()), 0o600))

	counter := &callCounter{}
	type result struct {
		code        int
		out, errOut string
	}
	first := make(chan result, 1)
	go func() {
		code, out, errOut := runCounted(t, counter, env, "batch", "start", "--file", file, "--id", "progress-1", "--wait")
		first <- result{code, out, errOut}
	}()
	// A second --wait of the same batch while it runs attaches and follows it.
	require.Eventually(t, func() bool { return counter.starts.Load() == 1 }, time.Minute, 50*time.Millisecond)
	code, again, againErr := runCounted(t, counter, env, "batch", "start", "--file", file, "--id", "progress-1", "--wait")
	require.Equal(t, exitReported, code, againErr)
	require.Contains(t, again, "attached to batch/progress-1")
	r := <-first
	code, out, errOut := r.code, r.out, r.errOut
	require.Equal(t, exitReported, code, "rejections exit 3: %s\n%s", out, errOut)
	require.Equal(t, int32(1), counter.starts.Load(), "the counter wraps the starter's client; the attach started nothing")
	require.Equal(t, tableRow(t, out, "expedia"), tableRow(t, again, "expedia"), "a re-attached --wait counts alike")
	require.Zero(t, counter.queries.Load(), "following a batch sends no workflow query")
	t.Logf("--wait printed:\n%s%s", errOut, out)

	var lines [][]string
	for _, l := range strings.Split(strings.TrimSpace(errOut), "\n") {
		if m := progressLineRE.FindStringSubmatch(l); m != nil {
			lines = append(lines, m)
		}
	}
	require.NotEmpty(t, lines, "progress lines: %s", errOut)
	last := lines[len(lines)-1]
	require.Equal(t, []string{"expedia", "67", "67", "100.0", "0s"}, []string{last[1], last[2], last[3], last[4], last[6]},
		"the last line is every update done: %s", errOut)
	moved := false
	for i := 1; i < len(lines); i++ {
		prev, _ := strconv.Atoi(lines[i-1][2])
		cur, _ := strconv.Atoi(lines[i][2])
		require.GreaterOrEqual(t, cur, prev, "done never goes back: %s", errOut)
		at0, _ := time.Parse("15:04:05", lines[i-1][0][:8])
		at1, _ := time.Parse("15:04:05", lines[i][0][:8])
		// A line every 5 s (polls every second; a loaded machine delays a few).
		require.LessOrEqual(t, at1.Sub(at0), progressEvery+3*pollEvery, "a line at least every few seconds: %s", errOut)
		moved = moved || cur > prev && cur < 67
	}
	require.True(t, moved, "progress moves while requests are delivered, not only at the end: %s", errOut)
	require.Contains(t, out, "5 more rejections not listed above (50 of 55 listed); 'starter batch rejections progress-1' lists every one")
	summary := tableRow(t, out, "expedia")
	require.Equal(t, []string{"67", "12", "0", "55", "0"}, summary[1:6], "summary: total committed superseded rejected dead-lettered: %s", out)

	// batch status counts as --wait did, without a query either.
	code, js, errOut := runCounted(t, counter, env, "batch", "status", "progress-1", "-o", "json")
	require.Equal(t, exitReported, code, errOut)
	require.Zero(t, counter.queries.Load(), "batch status sends no workflow query")
	var rep statusReport
	require.NoError(t, json.Unmarshal([]byte(js), &rep), js)
	require.True(t, rep.Planned)
	require.Len(t, rep.Channels, 1)
	require.Equal(t, models.ChannelCounts{Channel: "expedia", Total: 67, Committed: 12, Rejected: 55,
		Requests: rep.Channels[0].Requests, Deferred: rep.Channels[0].Deferred}, rep.Channels[0])
	require.Equal(t, summary[6:8], []string{strconv.Itoa(rep.Channels[0].Deferred), strconv.Itoa(rep.Channels[0].Requests)},
		"deferred and requests as the summary printed them")
	require.Equal(t, []string{"67", "67"}, []string{strconv.Itoa(rep.Progress[0].Done), strconv.Itoa(rep.Progress[0].Total)})

	code, table, _ := runCounted(t, counter, env, "batch", "status", "progress-1")
	require.Equal(t, exitReported, code)
	require.Equal(t, summary[1:6], tableRow(t, table, "expedia")[1:6], "the table counts as --wait did")
	require.Zero(t, counter.queries.Load())
}

// tableRow is the fields of the row of out that starts with first.
func tableRow(t *testing.T, out, first string) []string {
	t.Helper()
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) > 0 && f[0] == first {
			return f
		}
	}
	t.Fatalf("no %s row in:\n%s", first, out)
	return nil
}

// TestProgressLineRateAndETA: the rate is the updates done between two reads over
// the time between them, the ETA what is left at it; no rate yet is no ETA.
func TestProgressLineRateAndETA(t *testing.T) {
	then := []models.ChannelCounts{{Channel: "agoda", Total: 6666, Committed: 200}, {Channel: "expedia", Total: 10, Committed: 10}}
	now := []models.ChannelCounts{{Channel: "agoda", Total: 6666, Committed: 400, Rejected: 10}, {Channel: "expedia", Total: 10, Committed: 10}}
	rs := ops.Rates(now, then, 5*time.Second)
	require.Equal(t, "410/6666 (6.2%) 42.0/s ETA 2m29s", progressLine(rs[0]))
	require.Equal(t, "10/10 (100.0%) 0.0/s ETA 0s", progressLine(rs[1]))
	require.Equal(t, "410/6666 (6.2%) 0.0/s ETA -", progressLine(ops.Rates(now, now, 5*time.Second)[0]),
		"nothing moved: no ETA")
}

// TestStatusTableOfARunningBatch: a running batch's status prints a progress line
// per channel above the table, and says when its totals are not planned yet.
func TestStatusTableOfARunningBatch(t *testing.T) {
	counts := []models.ChannelCounts{{Channel: "agoda", Total: 6666, Committed: 2400}}
	rep := statusReport{WorkflowID: "batch/b-2", State: "running", Planned: true, Channels: counts,
		Progress: ops.Rates(counts, nil, 60*time.Second)}
	var out strings.Builder
	(&cli{stdout: &out, stderr: &out}).statusTable(rep, "paritysync")
	require.Contains(t, out.String(), "agoda        2400/6666 (36.0%) 40.0/s ETA 1m47s\n")
	require.NotContains(t, out.String(), "not planned yet")
	out.Reset()
	rep.Planned = false
	(&cli{stdout: &out, stderr: &out}).statusTable(rep, "paritysync")
	require.Contains(t, out.String(), "not planned yet (is a worker running on task queue paritysync?)")
}
