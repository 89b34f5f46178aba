package main

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/paritysync/paritysync/ops"
)

// TestChannelStarFansOutToTheChannelsMappedOverHTTP maps a property to two
// channels over the API (stored in PostgreSQL) and posts one mutation for channel
// "*": it becomes one per mapped channel, each committed under <id>@<channel>; the
// dry run plans a request on each; a property mapped on none is a rejected row on
// channel. Remapping takes effect on the next request, no restart. Every call is
// checked against openapi.yaml.
func TestChannelStarFansOutToTheChannelsMappedOverHTTP(t *testing.T) {
	t.Parallel()
	c, _, h := startAPI(t)

	resp := c.do(t, h, request(http.MethodGet, "/v1/properties/prop_0000abcd/channels", ""), true)
	require.Equal(t, propertyChannels{PropertyID: "prop_0000abcd", Channels: []string{}}, decodeJSON[propertyChannels](t, resp))
	put := func(key, body string) *http.Response {
		req := requestAs(key, http.MethodPut, "/v1/properties/prop_0000abcd/channels", body)
		return c.do(t, h, req, true)
	}
	resp = put(testKey, `{"channels":["expedia","agoda"]}`)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, []string{"agoda", "expedia"}, decodeJSON[propertyChannels](t, resp).Channels)
	resp = put(testKey, `{"channels":["expedia","nosuch"]}`)
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	require.Equal(t, "channels[1]", decodeProblem(t, resp).Field)
	require.Equal(t, http.StatusForbidden, put(betaKey, `{"channels":[]}`).StatusCode, "operator keys only")
	require.Equal(t, http.StatusNotFound, c.do(t, h, request(http.MethodGet, "/v1/properties/nope/channels", ""), true).StatusCode)

	star := mutationRow("f1", "*", 2)
	unmapped := strings.Replace(mutationRow("f2", "*", 2), "prop_0000abcd", "prop_0000ffff", 1)
	body := star + "\n" + unmapped + "\n"
	post := func(query string) *http.Response {
		req := request(http.MethodPost, "/v1/batches"+query, body)
		req.Header.Set("Content-Type", "application/x-ndjson")
		return c.do(t, h, req, true)
	}
	dry := decodeJSON[ops.DryRunReport](t, post("?dry_run=true"))
	require.Equal(t, 2, dry.Mutations)
	require.Equal(t, 2, dry.Accepted, "f1 on two channels")
	require.Len(t, dry.Rejected, 1)
	require.Equal(t, "channel", dry.Rejected[0].Field)
	require.Equal(t, ops.RuleNoMappedChannel, dry.Rejected[0].Rule)
	var planned []string
	for _, p := range dry.Channels {
		require.Equal(t, 1, p.Requests, p.Channel)
		planned = append(planned, p.Channel)
	}
	require.Equal(t, []string{"agoda", "expedia"}, planned)

	resp = post("")
	require.Equal(t, http.StatusAccepted, resp.StatusCode)
	acc := decodeJSON[batchAccepted](t, resp)
	require.Equal(t, 2, acc.Accepted)
	for _, id := range []string{"f1@agoda", "f1@expedia"} {
		awaitCommitted(t, c, h, acc.StatusURL+"/outcomes?mutation="+id, 2*time.Minute, "%s is committed on its own channel", id)
	}
	rej := decodeJSON[outcomeList](t, c.do(t, h, request(http.MethodGet, acc.StatusURL+"/rejections", ""), true))
	require.Len(t, rej.Outcomes, 1)
	require.Equal(t, "f2", rej.Outcomes[0].MutationID)

	// Remapped: the next request fans out to the new list.
	require.Equal(t, http.StatusOK, put(testKey, `{"channels":["booking_com"]}`).StatusCode)
	dry = decodeJSON[ops.DryRunReport](t, post("?dry_run=true"))
	require.Len(t, dry.Channels, 1)
	require.Equal(t, "booking_com", dry.Channels[0].Channel)
}
