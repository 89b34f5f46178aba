package main

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.temporal.io/api/workflowservice/v1"

	"github.com/paritysync/paritysync/ops"
)

// workflowCount is how many workflows the stack's namespace lists.
func (s *apiStack) workflowCount(t *testing.T) int {
	t.Helper()
	resp, err := s.TC.ListWorkflow(context.Background(), &workflowservice.ListWorkflowExecutionsRequest{Namespace: s.Env["TEMPORAL_NAMESPACE"]})
	require.NoError(t, err)
	return len(resp.GetExecutions())
}

// batchRows is how many batches the stack's schema holds.
func (s *apiStack) batchRows(t *testing.T) int {
	t.Helper()
	// A pool, as the worker opens the URL: it carries the pool's own parameters.
	pool, err := pgxpool.New(context.Background(), s.Env["PARITYSYNC_DATABASE_URL"])
	require.NoError(t, err)
	defer pool.Close()
	var n int
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT count(*) FROM batches`).Scan(&n))
	return n
}

// TestDryRunStartsNothingAndPlansTheRequestsTheBatchSends posts a partly invalid
// body with dry_run=true: the answer (checked against openapi.yaml) names the
// refused row's field and rule and the requests per channel, and neither Temporal
// nor PostgreSQL holds anything after it. The same body posted for real then sends
// exactly the requests the dry run planned.
func TestDryRunStartsNothingAndPlansTheRequestsTheBatchSends(t *testing.T) {
	t.Parallel()
	c := loadContract(t)
	s := startStack(t)
	var rows []string
	for i := range 4 {
		// Four rooms on booking_com: one request of four lines; two on expedia.
		rows = append(rows, mutationRow(fmt.Sprintf("d%d", i), "booking_com", i+1, `"room_type_code":"DBL"`, fmt.Sprintf(`"room_type_code":"R%d"`, i)))
	}
	rows = append(rows, mutationRow("e1", "expedia", 3), mutationRow("e2", "expedia", 2, `"inventory":2`, `"amount":"120.00","currency":"EUR"`))
	rows = append(rows, mutationRow("e0", "expedia", 1)) // an older version of e1's cell: superseded
	rows = append(rows, mutationRow("bad", "booking_com", 1, `"inventory":1`, `"inventory":1000`))
	body := strings.Join(rows, "\n") + "\n"
	post := func(query string) *http.Response {
		req := request(http.MethodPost, "/v1/batches"+query, body)
		req.Header.Set("Content-Type", "application/x-ndjson")
		return c.do(t, s.api, req, false) // one row is invalid on purpose
	}

	resp := post("?dry_run=true")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	dry := decodeJSON[ops.DryRunReport](t, resp)
	require.Equal(t, 8, dry.Mutations)
	require.Equal(t, 7, dry.Accepted)
	require.Len(t, dry.Rejected, 1)
	require.Equal(t, "inventory", dry.Rejected[0].Field)
	require.NotEmpty(t, dry.Rejected[0].Rule)
	require.Equal(t, 1, dry.Superseded)
	byChannel := map[string]ops.ChannelPlan{}
	for _, p := range dry.Channels {
		byChannel[p.Channel] = p
	}
	require.Equal(t, 1, byChannel["booking_com"].Requests, "%+v", dry.Channels)
	require.Equal(t, 4, byChannel["booking_com"].Lines)
	require.Equal(t, 2, byChannel["expedia"].Requests, "availability and rates: %+v", dry.Channels)
	// 2 requests at 600 a minute: 200 ms.
	require.Equal(t, int64(200), byChannel["expedia"].TimeNeededMS)
	require.Equal(t, "200ms", dry.TimeNeeded)

	resp = post("?dry_run=maybe")
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	require.Equal(t, "dry_run", decodeProblem(t, resp).Field)

	require.Zero(t, s.batchRows(t), "a dry run stores no batch")
	require.Zero(t, s.workflowCount(t), "a dry run starts no workflow")

	// The real run sends what the dry run planned.
	resp = post("")
	require.Equal(t, http.StatusAccepted, resp.StatusCode)
	acc := decodeJSON[batchAccepted](t, resp)
	view := awaitBatchDone(t, c, s.api, acc.StatusURL, 2*time.Minute)
	require.NotNil(t, view.Result)
	for _, ch := range view.Result.Channels {
		if ch.Requests > 0 || byChannel[ch.Channel].Requests > 0 {
			require.Equal(t, byChannel[ch.Channel].Requests, ch.Requests, "channel %s", ch.Channel)
		}
	}
	require.Eventually(t, func() bool { return s.workflowCount(t) >= 1 }, 10*time.Second, 200*time.Millisecond,
		"the namespace lists the real batch, so its zero before was not a lag")
}
