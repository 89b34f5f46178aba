package main

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/paritysync/paritysync/activities/store"
	"github.com/paritysync/paritysync/models"
)

// TestAdmissionBadInputCancelAndReplayOverHTTP runs on one real stack (a dev
// server, Redis, PostgreSQL, the simulator, a worker) with smoothers admitting at
// most 2 waiting changes and DELETE waiting at most 1 ms; every request and answer
// is checked against openapi.yaml.
func TestAdmissionBadInputCancelAndReplayOverHTTP(t *testing.T) {
	t.Parallel() // a namespace, task queue, key prefix and schema of its own
	c, s, h := startAPI(t, func(cfg *Config) {
		cfg.SmootherMaxPending = 2
		cfg.CancelWait = time.Millisecond
	})

	t.Run("a full smoother refuses its channel's changes with 429, Retry-After and the per-change list", func(t *testing.T) {
		body := "[" + strings.Join([]string{
			mutationRow("s1", "expedia", 1),
			mutationRow("s2", "agoda", 1),
			mutationRow("s3", "expedia", 1, `"room_type_code":"DBL"`, `"room_type_code":"TWN"`),
			mutationRow("s4", "expedia", 1, `"room_type_code":"DBL"`, `"room_type_code":"STE"`),
		}, ",") + "]"
		resp := c.do(t, h, request(http.MethodPost, "/v1/changes", body), true)
		require.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
		p := decodeProblem(t, resp)
		require.Equal(t, problemBase+probSmootherFull, p.Type)
		header, err := strconv.Atoi(resp.Header.Get("Retry-After"))
		require.NoError(t, err, "Retry-After is delta-seconds")
		require.Positive(t, header)
		require.Equal(t, header, p.RetryAfter)
		require.Len(t, p.Changes, 4)
		for _, ch := range p.Changes {
			if ch.ID == "s2" {
				require.Equal(t, changeAccepted, ch.Status, "agoda's smoother has room: %+v", ch)
				require.Equal(t, "/v1/changes/s2", ch.OutcomeURL)
				continue
			}
			require.Equal(t, changeRefused, ch.Status, "3 expedia changes do not fit under 2: %+v", ch)
			require.Equal(t, header, ch.RetryAfter)
			require.Len(t, ch.Problems, 1)
			require.Equal(t, "channel", ch.Problems[0].Field)
			require.Equal(t, ruleSmootherFull, ch.Problems[0].Rule)
			require.Contains(t, ch.Problems[0].Detail, "at most 2 changes")
		}
		awaitCommitted(t, c, h, "/v1/changes/s2", 2*time.Minute, "the accepted change of a 429 answer gets its outcome")
	})

	t.Run("a partly invalid batch starts its valid rows and lists every bad one by field and rule", func(t *testing.T) {
		rows := []string{
			mutationRow("ok1", "booking_com", 1),
			mutationRow("dup", "booking_com", 1, `"room_type_code":"DBL"`, `"room_type_code":"TWN"`),
			mutationRow("dup", "booking_com", 1, `"room_type_code":"DBL"`, `"room_type_code":"STE"`),
			`{"id":"huge","property_id":"prop_0000abcd","note":"` + strings.Repeat("x", 5<<20) + `"}`,
			mutationRow("yen", "booking_com", 1, `"inventory":1`, `"amount":"1000.5","currency":"JPY"`),
			mutationRow("ok2", "agoda", 1),
		}
		req := request(http.MethodPost, "/v1/batches", strings.Join(rows, "\n")+"\n")
		req.Header.Set("Content-Type", "application/x-ndjson")
		resp := c.do(t, h, req, false) // the 5 MB line and the duplicate break the schema on purpose
		require.Equal(t, http.StatusAccepted, resp.StatusCode)
		acc := decodeJSON[batchAccepted](t, resp)
		require.Equal(t, 6, acc.Mutations)
		want := map[string]string{ // line → field: rule
			"3": "id: " + models.RuleUniqueID,
			"4": models.FieldMutation + ": " + models.RuleRowTooLong,
			"5": "amount: " + models.RuleAmountPlaces,
		}
		got := map[string]string{}
		for _, p := range acc.Rejected {
			got[strconv.Itoa(p.Line)] = p.Field + ": " + p.Rule
		}
		require.Equal(t, want, got, "every bad row is listed with its field and rule: %+v", acc.Rejected)
		require.Equal(t, 3, acc.Accepted, "the valid rows (and the first of the duplicates) start")

		view := awaitBatchDone(t, c, h, acc.StatusURL, 2*time.Minute)
		require.Equal(t, 3, view.Totals.Committed+view.Totals.Superseded, "%+v", view.Totals)
		require.Equal(t, 3, view.Totals.Rejected, "%+v", view.Totals)

		rej := decodeJSON[outcomeList](t, c.do(t, h, request(http.MethodGet, acc.StatusURL+"/rejections", ""), true))
		reasons := map[string]string{}
		for _, o := range rej.Outcomes {
			require.Equal(t, models.OutcomeRejected, o.Outcome)
			reasons[o.MutationID] = o.Reason
		}
		require.Len(t, reasons, 3, "%+v", rej.Outcomes)
		require.Contains(t, reasons["yen"], want["5"])
		require.Contains(t, reasons["line-4"], want["4"], "a row too long to read is named by its line")
		require.Contains(t, reasons["dup"], want["3"])
	})

	t.Run("DELETE answers 202 with the status URL while a cancel goes on", func(t *testing.T) {
		resp := c.do(t, h, request(http.MethodPost, "/v1/channels/expedia/pause", `{"reason":"cancel test"}`), true)
		require.Equal(t, http.StatusOK, resp.StatusCode)
		defer c.do(t, h, request(http.MethodPost, "/v1/channels/expedia/resume", ""), true)
		var rows []string
		for i := range 20 {
			rows = append(rows, mutationRow(fmt.Sprintf("x%d", i), "expedia", 10+i, `"room_type_code":"DBL"`, fmt.Sprintf(`"room_type_code":"X%d"`, i)))
		}
		req := request(http.MethodPost, "/v1/batches", strings.Join(rows, "\n")+"\n")
		req.Header.Set("Content-Type", "application/x-ndjson")
		acc := decodeJSON[batchAccepted](t, c.do(t, h, req, true))
		resp = c.do(t, h, request(http.MethodDelete, acc.StatusURL, ""), true)
		require.Equal(t, http.StatusAccepted, resp.StatusCode)
		ans := decodeJSON[map[string]any](t, resp)
		require.Equal(t, "cancelling", ans["state"])
		require.Equal(t, acc.StatusURL, ans["status_url"])
		require.Eventually(t, func() bool {
			v := decodeJSON[batchView](t, c.do(t, h, request(http.MethodGet, acc.StatusURL, ""), true))
			return v.State == "cancelled"
		}, 2*time.Minute, 250*time.Millisecond, "the cancel went through")
	})

	t.Run("a replay started over the API is the replaying tenant's batch", func(t *testing.T) {
		m := models.Mutation{ID: "parked-1", PropertyID: "prop_0000abcd", RoomTypeCode: "DBL", RatePlanCode: "BAR",
			Channel: "agoda", StayDate: models.DateOf(time.Now().UTC().AddDate(0, 0, 9)), Version: 1}
		inv := 4
		m.Inventory = &inv
		co := models.Coalesce([]models.Mutation{m}, nil)
		require.Len(t, co.Requests, 1)
		_, parked, err := s.st.ParkDeadLetter(context.Background(), store.DeadLetter{
			BatchID: "acme.parked-" + uuid.NewString()[:8], Reason: "auth", Status: 401, Request: co.Requests[0]})
		require.NoError(t, err)
		require.True(t, parked)
		resp := c.do(t, h, request(http.MethodPost, "/v1/dlq/replay", `{"channel":"agoda"}`), true)
		require.Equal(t, http.StatusAccepted, resp.StatusCode)
		ans := decodeJSON[map[string]any](t, resp)
		id, _ := ans["batch_id"].(string)
		require.True(t, strings.HasPrefix(id, "acme.replay-"), "batch id %q", id)
		require.Equal(t, "/v1/batches/"+id, ans["status_url"])
		awaitBatchDone(t, c, h, "/v1/batches/"+id, 2*time.Minute, "acme reads the replay it started")
		resp = c.do(t, h, requestAs(betaKey, http.MethodGet, "/v1/batches/"+id, ""), true)
		require.Equal(t, http.StatusNotFound, resp.StatusCode, "another tenant does not")
	})
}
