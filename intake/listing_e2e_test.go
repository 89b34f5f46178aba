package main

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// listPage is GET path as key, checked against openapi.yaml.
func listPage(t *testing.T, c *contract, h http.Handler, key, path string) batchList {
	t.Helper()
	resp := c.do(t, h, requestAs(key, http.MethodGet, path, ""), true)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	return decodeJSON[batchList](t, resp)
}

// ids are the batch ids of a page.
func (l batchList) ids() []string {
	out := make([]string, len(l.Batches))
	for i, b := range l.Batches {
		out[i] = b.BatchID
	}
	return out
}

// TestBatchListingIsTenantScopedPagedAndFiltered lists batches from the store: a
// tenant sees only its own, an operator every tenant's; pages follow next to the
// end without a gap or a repeat; state, since and channel filter; a batch posted
// over the API is listed at once and done once BatchSync recorded its end.
func TestBatchListingIsTenantScopedPagedAndFiltered(t *testing.T) {
	t.Parallel()
	c, s, h := startAPI(t)
	ctx := context.Background()
	var beta []string
	for i := range 7 {
		id := fmt.Sprintf("beta.b-%d", i)
		require.NoError(t, s.st.RegisterBatch(ctx, id))
		beta = append(beta, id)
		time.Sleep(2 * time.Millisecond) // distinct creation times, newest last
	}
	require.NoError(t, s.st.RecordExpected(ctx, "beta.b-2", map[string]int{"agoda": 3}))
	require.NoError(t, s.st.FinishBatch(ctx, "beta.b-3", "cancelled", nil))
	require.NoError(t, s.st.RegisterBatch(ctx, "20270301-operator"))

	// A tenant's pages: newest first, all of its batches, none of another's.
	var got []string
	path := "/v1/batches?limit=3"
	for pages := 0; path != ""; pages++ {
		require.Less(t, pages, 4)
		l := listPage(t, c, h, betaKey, path)
		require.LessOrEqual(t, len(l.Batches), 3)
		got = append(got, l.ids()...)
		path = l.Next
	}
	want := make([]string, len(beta))
	for i := range beta {
		want[i] = beta[len(beta)-1-i]
	}
	require.Equal(t, want, got, "every page in order, no gap, no repeat")

	require.Equal(t, []string{"beta.b-2"}, listPage(t, c, h, betaKey, "/v1/batches?channel=agoda").ids())
	require.Equal(t, []string{"beta.b-3"}, listPage(t, c, h, betaKey, "/v1/batches?state=cancelled").ids())
	require.Len(t, listPage(t, c, h, betaKey, "/v1/batches?state=running").Batches, 6)
	future := url.QueryEscape(time.Now().Add(time.Hour).UTC().Format(time.RFC3339))
	require.Empty(t, listPage(t, c, h, betaKey, "/v1/batches?since="+future).Batches)

	// A batch posted over the API: listed at once for its tenant and the operator.
	resp := c.do(t, h, request(http.MethodPost, "/v1/batches", "["+mutationRow("l1", "expedia", 1)+"]"), true)
	require.Equal(t, http.StatusAccepted, resp.StatusCode)
	acc := decodeJSON[batchAccepted](t, resp)
	all := listPage(t, c, h, testKey, "/v1/batches?limit=500")
	require.Contains(t, all.ids(), acc.BatchID)
	require.Contains(t, all.ids(), "beta.b-0", "an operator sees every tenant's batches")
	require.Contains(t, all.ids(), "20270301-operator")
	require.NotContains(t, listPage(t, c, h, betaKey, "/v1/batches?limit=500").ids(), acc.BatchID,
		"a tenant never sees another's batch")
	require.Eventually(t, func() bool {
		l := listPage(t, c, h, testKey, "/v1/batches?state=done")
		for _, b := range l.Batches {
			if b.BatchID == acc.BatchID {
				require.False(t, b.EndedAt.IsZero())
				require.Equal(t, []string{"expedia"}, b.Channels)
				return true
			}
		}
		return false
	}, 2*time.Minute, 250*time.Millisecond, "BatchSync records how the batch ended")

	for _, bad := range []string{"state=bogus", "since=yesterday", "limit=0", "cursor=nope"} {
		resp := c.do(t, h, requestAs(betaKey, http.MethodGet, "/v1/batches?"+bad, ""), false) // off the schema on purpose
		require.Equal(t, http.StatusBadRequest, resp.StatusCode, bad)
		require.Equal(t, strings.SplitN(bad, "=", 2)[0], decodeProblem(t, resp).Field, bad)
	}
}
