package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

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
		{"wrong type in an array", "[\n" + goodLine + ",\n" + strings.Replace(goodLine, `"version":3`, `"version":"x"`, 1) + "\n]", "line 3: field version: want int64, got string"},
		{"unknown field on a line", goodLine + "\n" + strings.Replace(goodLine, `"amount"`, `"amout"`, 1), `line 2: unknown field "amout"`},
		{"bad date on a line", strings.Replace(goodLine, "2030-01-02", "02/01/2030", 1), `line 1: date "02/01/2030": want YYYY-MM-DD`},
		{"two values on a line", goodLine + " " + goodLine, "line 1: more than one JSON value"},
		{"empty file", "  \n", "no mutations"},
		{"empty array", "[]", "no mutations"},
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

func TestBatchStartRefusesMalformedFileBeforeConnecting(t *testing.T) {
	path := writeFile(t, "[{\"id\": ]")
	var out, errOut bytes.Buffer
	// An unreachable Temporal proves nothing was started: the file is read first.
	env := map[string]string{"TEMPORAL_ADDRESS": "127.0.0.1:1", "REDIS_URL": "redis://127.0.0.1:1/0"}
	code := run([]string{"batch", "start", "--file", path}, &out, &errOut, func(k string) string { return env[k] })
	require.Equal(t, exitError, code)
	require.Equal(t, 1, strings.Count(errOut.String(), "\n"), errOut.String())
	require.Contains(t, errOut.String(), path+" line 1:")
	require.Empty(t, out.String())
}

func TestUsageErrors(t *testing.T) {
	for _, args := range [][]string{nil, {"bogus"}, {"batch", "start"}, {"channel", "pause", "expedia"}, {"batch", "status"}} {
		var out, errOut bytes.Buffer
		require.Equal(t, exitUsage, run(args, &out, &errOut, func(string) string { return "" }), "%v", args)
		require.Contains(t, errOut.String(), "usage:")
	}
}

func TestSummaryExitStatus(t *testing.T) {
	clean := models.BatchStatus{Channels: []models.ChannelCounts{{Channel: "expedia", Total: 5, Committed: 4, Superseded: 1}}}
	var out bytes.Buffer
	require.NoError(t, summary(clean, &out))
	require.Contains(t, out.String(), "expedia")

	rejected := models.BatchStatus{Channels: []models.ChannelCounts{{Channel: "expedia", Total: 5, Committed: 4, Rejected: 1}},
		Rejected: []models.Rejection{{MutationID: "m9", Channel: "expedia", Problems: []models.FieldError{{Field: "currency", Rule: "must be an active ISO 4217 code"}}}}}
	out.Reset()
	require.ErrorIs(t, summary(rejected, &out), errReported)
	require.Contains(t, out.String(), "rejected m9 (expedia): currency: must be an active ISO 4217 code")

	lost := models.BatchStatus{Channels: []models.ChannelCounts{{Channel: "agoda", Total: 5, Committed: 4}}}
	out.Reset()
	require.ErrorIs(t, summary(lost, &out), errReported)
	require.Contains(t, out.String(), "1 updates without an outcome")
}

func TestSampleWritesValidJSONLines(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.jsonl")
	var out, errOut bytes.Buffer
	require.Equal(t, exitOK, run([]string{"sample", "--mutations", "200", "--out", path}, &out, &errOut, func(string) string { return "" }), errOut.String())
	ms, err := readMutations(path)
	require.NoError(t, err)
	require.Len(t, ms, 200)
}
