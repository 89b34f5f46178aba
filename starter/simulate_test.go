package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/paritysync/paritysync/dial/redistest"
)

// burstTrace is a 10-minute burst pattern on one channel: every 2 minutes a burst of
// 40 rates requests from 4 properties within 4 seconds, and an urgent stop-sell in
// the middle of each burst.
func burstTrace() string {
	var b strings.Builder
	b.WriteString("at_seconds,channel,family,property_id,priority\n")
	for burst := range 5 {
		start := float64(burst * 120)
		for i := range 40 {
			fmt.Fprintf(&b, "%.1f,expedia,rates,prop_%08x,5\n", start+float64(i)*0.1, i%4+1)
		}
		fmt.Fprintf(&b, "%.1f,expedia,restrictions,prop_%08x,1\n", start+2, 9)
	}
	return b.String()
}

func TestSimulateReplaysATraceThroughTheRealLimiter(t *testing.T) {
	path := writeFile(t, burstTrace())
	env := map[string]string{"PARITYSYNC_CHANNEL_EXPEDIA_RATE_PER_MINUTE": "30", "PARITYSYNC_CHANNEL_EXPEDIA_BURST": "3",
		"REDIS_URL": redistest.Reachable(t)}
	code, out, errOut := runCLI(t, env, "simulate", "--trace", path, "--output", "json")
	require.Equal(t, exitOK, code, errOut)
	var res []simChannel
	require.NoError(t, json.Unmarshal([]byte(out), &res))
	require.Len(t, res, 1)
	sc := res[0]
	t.Logf("simulate: %d requests, %d sent, most in 60 s %d", sc.Requests, sc.Sent, sc.MostInWindow)
	for _, m := range sc.Minutes {
		t.Logf("minute %d: arrived %d, sent %d, delayed %d, max wait %.1f s", m.Minute, m.Arrived, m.Sent, m.Delayed, m.MaxWaitS)
		require.LessOrEqual(t, m.Sent, 30, "minute %d", m.Minute)
	}
	require.Equal(t, 205, sc.Requests)
	require.Equal(t, 205, sc.Sent, "every request is sent in the end")
	require.LessOrEqual(t, sc.MostInWindow, 30, "never more than the limit in any 60 s")
	// Each burst of 41 cannot go out within its minute at 30/min: some wait.
	require.Positive(t, sc.Minutes[0].Delayed)
	require.Equal(t, 41, sc.Minutes[0].Arrived)

	code, out, _ = runCLI(t, env, "simulate", "--trace", path)
	require.Equal(t, exitOK, code)
	require.Contains(t, out, "expedia (30/min, burst 3): 205 requests, 205 sent")
}

func TestSimulateNamesTheLineAndColumnOfABadTrace(t *testing.T) {
	for body, want := range map[string]string{
		"at_seconds,channel,family\n":                                           "column property_id is required",
		"at_seconds,channel,family,property_id\nsoon,expedia,rates,p\n":         "line 2: at_seconds",
		"at_seconds,channel,family,property_id\n1,expedia,prices,p\n":           "line 2: family",
		"at_seconds,channel,family,property_id,priority\n1,expedia,rates,p,9\n": "line 2: priority: want 1..5",
	} {
		code, _, errOut := runCLI(t, nil, "simulate", "--trace", writeFile(t, body))
		require.Equal(t, exitData, code, errOut)
		require.Contains(t, errOut, want)
	}
}
