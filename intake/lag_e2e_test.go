package main

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// lagOf is GET path's answer for channel, checked against openapi.yaml.
func lagOf(t *testing.T, c *contract, h http.Handler, key, path, channel string) channelLag {
	t.Helper()
	resp := c.do(t, h, requestAs(key, http.MethodGet, path, ""), true)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	v := decodeJSON[lagView](t, resp)
	require.Equal(t, lagWindow.Seconds(), v.WindowSeconds)
	for _, l := range v.Channels {
		if l.Channel == channel {
			return l
		}
	}
	t.Fatalf("%s lists no %s: %+v", path, channel, v)
	return channelLag{}
}

// TestParityLagPerPropertyOverHTTP: while a channel is paused, a property's
// change waits, and GET /v1/lag?property= tells its owed cell and an age that
// rises, the channel's own lag its pending update; after the resume the property
// owes nothing. A tenant reads only its own properties, and only an operator the
// channel's lag (every tenant's work).
func TestParityLagPerPropertyOverHTTP(t *testing.T) {
	t.Parallel()
	c, _, h := startAPI(t)

	resp := c.do(t, h, request(http.MethodPost, "/v1/channels/expedia/pause", `{"reason":"lag test"}`), true)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	acc := decodeJSON[batchAccepted](t, c.do(t, h, request(http.MethodPost, "/v1/batches",
		"["+mutationRow("lag1", "expedia", 1)+"]"), true))
	require.Equal(t, 1, acc.Accepted)

	const mine = "/v1/lag?property=prop_0000abcd&channel=expedia"
	var first channelLag
	require.Eventually(t, func() bool {
		first = lagOf(t, c, h, testKey, mine, "expedia")
		return first.OwedCells == 1 && first.OldestSeconds > 0
	}, time.Minute, 200*time.Millisecond, "the batch recorded the desired change")
	require.Equal(t, "prop_0000abcd", first.Property)
	time.Sleep(1500 * time.Millisecond)
	require.Greater(t, lagOf(t, c, h, testKey, mine, "expedia").OldestSeconds, first.OldestSeconds+1,
		"the age rises while the channel is paused")
	require.Zero(t, lagOf(t, c, h, testKey, "/v1/lag?property=prop_0000abcd", "agoda").OwedCells,
		"a channel with no change for the property owes it nothing")
	require.Eventually(t, func() bool {
		return lagOf(t, c, h, testKey, "/v1/lag?channel=expedia", "expedia").PendingUpdates == 1
	}, time.Minute, 200*time.Millisecond, "the channel's lag counts the batch's pending update")

	for _, forbidden := range []string{"/v1/lag", "/v1/lag?property=prop_0000abcd"} {
		resp := c.do(t, h, requestAs(betaKey, http.MethodGet, forbidden, ""), true)
		require.Equal(t, http.StatusForbidden, resp.StatusCode, forbidden)
	}
	require.Zero(t, lagOf(t, c, h, betaKey, "/v1/lag?property=prop_bbbb0000", "expedia").OwedCells,
		"a tenant reads its own property")
	resp = c.do(t, h, request(http.MethodGet, "/v1/lag?channel=nope", ""), true)
	require.Equal(t, http.StatusNotFound, resp.StatusCode)

	resp = c.do(t, h, request(http.MethodPost, "/v1/channels/expedia/resume", ""), true)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Eventually(t, func() bool {
		l := lagOf(t, c, h, testKey, mine, "expedia")
		return l.OwedCells == 0 && l.OldestSeconds == 0 && l.AckedUpdates == 1
	}, time.Minute, 200*time.Millisecond, "acknowledged after the resume: the property is in parity")
}
