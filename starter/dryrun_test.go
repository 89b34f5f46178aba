package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/paritysync/paritysync/config"
	"github.com/paritysync/paritysync/models"
	"github.com/paritysync/paritysync/ops"
)

// TestBatchStartDryRunPrintsRequestsAndTimeAndStartsNothing runs batch start
// --dry-run on a file with one invalid row against unreachable services: it
// dials nothing (so it cannot start anything), names the refused row's field and
// rule, prints the requests per channel and the time their windows need, in the
// table and in -o json, and exits 3 for the refused row.
func TestBatchStartDryRunPrintsRequestsAndTimeAndStartsNothing(t *testing.T) {
	day := models.DateOf(time.Now().UTC().AddDate(0, 0, 7))
	var rows []string
	for i := range 130 {
		// 130 nights of alternating inventory on expedia: 130 lines, 2 requests of at
		// most 100 lines; one on booking_com.
		d := models.DateOf(day.Time().AddDate(0, 0, i))
		rows = append(rows, fmt.Sprintf(`{"id":"x%d","property_id":"prop_0000abcd","room_type_code":"DBL","rate_plan_code":"BAR","channel":"expedia","stay_date":%q,"inventory":%d,"version":1}`,
			i, d, i%2))
	}
	rows = append(rows, fmt.Sprintf(`{"id":"b1","property_id":"prop_0000abcd","room_type_code":"DBL","rate_plan_code":"BAR","channel":"booking_com","stay_date":%q,"inventory":3,"version":1}`, day))
	rows = append(rows, fmt.Sprintf(`{"id":"bad","property_id":"prop_0000abcd","room_type_code":"DBL","rate_plan_code":"BAR","channel":"booking_com","stay_date":%q,"inventory":1000,"version":1}`, day))
	path := writeFile(t, strings.Join(rows, "\n")+"\n")
	env := map[string]string{"TEMPORAL_ADDRESS": "127.0.0.1:1", "REDIS_URL": "redis://127.0.0.1:1/0",
		"PARITYSYNC_DATABASE_URL": "postgres://127.0.0.1:1/none"}

	code, out, errOut := runCLI(t, env, "batch", "start", "--dry-run", "--file", path)
	require.Equal(t, exitReported, code, "%s%s", out, errOut)
	require.Contains(t, out, "would reject line 132: inventory: must be in 0..999")
	require.Regexp(t, `(?m)^\s*expedia\s+130\s+0\s+2\s+130\s+1\s+\S+ channel\s+2\s+\S+`, out)
	require.Contains(t, out, "nothing started")

	code, out, errOut = runCLI(t, env, "batch", "start", "--dry-run", "--file", path, "-o", "json")
	require.Equal(t, exitReported, code, errOut)
	var r ops.DryRunReport
	require.NoError(t, json.Unmarshal([]byte(out), &r), out)
	require.Equal(t, 132, r.Mutations)
	require.Equal(t, 131, r.Accepted)
	require.Len(t, r.Rejected, 1)
	require.Equal(t, "inventory", r.Rejected[0].Field)
	require.Equal(t, 3, r.Requests)
	chs, err := config.LoadChannels("", func(string) string { return "" })
	require.NoError(t, err)
	for _, p := range r.Channels {
		cfg := models.ChannelMap(chs)[p.Channel]
		want := time.Duration(p.BusiestRequests) * cfg.WindowLength() / time.Duration(cfg.RatePerMinute)
		require.Equal(t, want.Round(time.Millisecond).Milliseconds(), p.TimeNeededMS, "%s: requests ÷ rate windows", p.Channel)
	}

	code, _, errOut = runCLI(t, env, "batch", "start", "--dry-run", "--wait", "--file", path)
	require.Equal(t, exitUsage, code, errOut)
}

// dryRunMapped dry-runs one row (fields: its id and channel, if any) for a
// property the store maps to channels, and returns the plan.
func dryRunMapped(t *testing.T, fields string, channels ...string) ops.DryRunReport {
	env, st := storeEnv(t)
	require.NoError(t, st.SetPropertyChannels(t.Context(), "prop_0000abcd", channels))
	day := models.DateOf(time.Now().UTC().AddDate(0, 0, 7))
	path := writeFile(t, fmt.Sprintf(`{%s,"property_id":"prop_0000abcd","room_type_code":"DBL","rate_plan_code":"BAR","stay_date":%q,"inventory":3,"version":1}`+"\n", fields, day))
	env["TEMPORAL_ADDRESS"] = "127.0.0.1:1" // a dry run never dials Temporal
	code, out, errOut := runCLI(t, env, "batch", "start", "--dry-run", "--file", path, "-o", "json")
	require.Equal(t, exitOK, code, errOut)
	var r ops.DryRunReport
	require.NoError(t, json.Unmarshal([]byte(out), &r), out)
	return r
}

// TestBatchStartDryRunFansOutChannelStar: a row for channel "*" is planned on every
// channel the store maps its property to, as intake fans it out.
func TestBatchStartDryRunFansOutChannelStar(t *testing.T) {
	r := dryRunMapped(t, `"id":"s1","channel":"*"`, "agoda", "expedia")
	require.Equal(t, 2, r.Accepted)
	require.Len(t, r.Channels, 2)
	require.Equal(t, "agoda", r.Channels[0].Channel)
	require.Equal(t, "expedia", r.Channels[1].Channel)
}

// TestBatchStartDryRunFansOutARowWithoutChannel: a row naming no channel is
// planned on every channel the store maps its property to, as "*" is.
func TestBatchStartDryRunFansOutARowWithoutChannel(t *testing.T) {
	r := dryRunMapped(t, `"id":"n1"`, "agoda", "booking_com")
	require.Equal(t, 2, r.Accepted)
	require.Len(t, r.Channels, 2)
	require.Equal(t, "agoda", r.Channels[0].Channel)
	require.Equal(t, "booking_com", r.Channels[1].Channel)
}
