package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shopspring/decimal"
	"github.com/stretchr/testify/require"

	"github.com/paritysync/paritysync/activities/store"
	"github.com/paritysync/paritysync/models"
	"github.com/paritysync/paritysync/ops"
)

// park parks a dead letter of one rate on channel ch in batch, at night offset days.
func park(t *testing.T, st *store.Store, batch, ch string, days int) int64 {
	t.Helper()
	amount := decimal.RequireFromString("99")
	m := models.Mutation{ID: "m-" + batch, PropertyID: "prop_0000abcd", RoomTypeCode: "DBL", RatePlanCode: "BAR", Channel: ch,
		StayDate: models.DateOf(time.Now().AddDate(0, 0, days)), Values: models.Values{Amount: &amount, Currency: "EUR"}, Version: 1}
	co := models.Coalesce([]models.Mutation{m}, nil)
	id, _, err := st.ParkDeadLetter(context.Background(), store.DeadLetter{BatchID: batch, Reason: models.ReasonRejected,
		Status: 400, Message: "rate plan unknown", Request: co.Requests[0]})
	require.NoError(t, err)
	return id
}

// exportLines is GET path's JSON lines.
func exportLines(t *testing.T, c *contract, h http.Handler, path string) []store.DeadLetter {
	t.Helper()
	resp := c.do(t, h, request(http.MethodGet, path, ""), true)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "application/x-ndjson", resp.Header.Get("Content-Type"))
	var out []store.DeadLetter
	for _, line := range strings.Split(strings.TrimSpace(readAll(t, resp)), "\n") {
		if line == "" {
			continue
		}
		var d store.DeadLetter
		require.NoError(t, jsonUnmarshal(line, &d), line)
		out = append(out, d)
	}
	return out
}

// TestDeadLettersExportAndAckOverHTTP exports dead letters as JSON lines by
// filter and acknowledges them by id and by selector: an acknowledged entry
// leaves the open list (GET /v1/dlq and the default export) and keeps its note in
// PostgreSQL; every answer is checked against openapi.yaml.
func TestDeadLettersExportAndAckOverHTTP(t *testing.T) {
	t.Parallel()
	c, s, h := startAPI(t)
	first := park(t, s.st, "acme.b-1", "expedia", 30)
	second := park(t, s.st, "acme.b-1", "expedia", 31)
	third := park(t, s.st, "acme.b-2", "agoda", 30)

	all := exportLines(t, c, h, "/v1/dlq/export")
	require.Len(t, all, 3)
	require.Equal(t, []int64{first, second, third}, []int64{all[0].ID, all[1].ID, all[2].ID}, "oldest first")
	require.Len(t, all[0].Request.Lines, 1, "an entry carries its request")
	require.Len(t, exportLines(t, c, h, "/v1/dlq/export?channel=expedia"), 2)
	require.Len(t, exportLines(t, c, h, "/v1/dlq/export?batch=acme.b-2"), 1)

	resp := c.do(t, h, request(http.MethodPost, "/v1/dlq/ack", `{"ids":[`+jsonInt(first)+`],"note":"fixed the rate plan"}`), true)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, ops.Acked{Acknowledged: 1, IDs: []int64{first}}, decodeJSON[ops.Acked](t, resp))
	open := decodeJSON[struct {
		DeadLetters []deadLetterView `json:"dead_letters"`
	}](t, c.do(t, h, request(http.MethodGet, "/v1/dlq", ""), true))
	require.Len(t, open.DeadLetters, 2, "an acknowledged entry leaves the open list")
	require.Len(t, exportLines(t, c, h, "/v1/dlq/export"), 2)
	withAcked := exportLines(t, c, h, "/v1/dlq/export?acked=true")
	require.Len(t, withAcked, 3)
	require.Equal(t, "tenant acme: fixed the rate plan", withAcked[0].AckNote)
	require.False(t, withAcked[0].AckedAt.IsZero())
	d, err := s.st.DeadLetter(context.Background(), first)
	require.NoError(t, err)
	require.False(t, d.AckedAt.IsZero(), "the acknowledgement is in PostgreSQL")

	// By selector: the batch's open entries only.
	resp = c.do(t, h, request(http.MethodPost, "/v1/dlq/ack", `{"batch":"acme.b-1"}`), true)
	require.Equal(t, ops.Acked{Acknowledged: 1, IDs: []int64{second}}, decodeJSON[ops.Acked](t, resp))
	left := exportLines(t, c, h, "/v1/dlq/export")
	require.Len(t, left, 1)
	require.Equal(t, third, left[0].ID)

	resp = c.do(t, h, request(http.MethodPost, "/v1/dlq/ack", `{}`), true) // valid by the schema, refused by the rule
	require.Equal(t, http.StatusBadRequest, resp.StatusCode, "acknowledging everything is never a default")
	resp = c.do(t, h, request(http.MethodPost, "/v1/dlq/ack", `{"ids":[999999]}`), true)
	require.Equal(t, http.StatusNotFound, resp.StatusCode)
	resp = c.do(t, h, request(http.MethodGet, "/v1/dlq/export?acked=yes", ""), false) // off the enum on purpose
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	resp = c.do(t, h, requestAs(betaKey, http.MethodGet, "/v1/dlq/export", ""), true)
	require.Equal(t, http.StatusForbidden, resp.StatusCode, "operator keys only")
	resp = c.do(t, h, requestAs(betaKey, http.MethodPost, "/v1/dlq/ack", `{"ids":[`+jsonInt(third)+`]}`), true)
	require.Equal(t, http.StatusForbidden, resp.StatusCode, "operator keys only")
}

func readAll(t *testing.T, resp *http.Response) string {
	t.Helper()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return string(b)
}

func jsonUnmarshal(s string, v any) error { return json.Unmarshal([]byte(s), v) }

func jsonInt(n int64) string { return strconv.FormatInt(n, 10) }
