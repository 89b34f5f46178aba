package main

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"go.uber.org/fx"

	"github.com/paritysync/paritysync/activities/store"
	"github.com/paritysync/paritysync/channels"
	"github.com/paritysync/paritysync/config"
	"github.com/paritysync/paritysync/dial/devtest"
	"github.com/paritysync/paritysync/e2e/stack"
	"github.com/paritysync/paritysync/models"
	"github.com/paritysync/paritysync/otasim/sim"
)

// The end-to-end tests run the API on real parts, over the harness the system
// tests start (e2e/stack): a Temporal dev server (TEMPORAL_CLI, or
// ../.bin/temporal), the Redis at REDIS_URL under a key prefix of its own, a
// PostgreSQL schema of its own, the simulator over HTTP and an in-process worker.

// TestMain stops the package's one dev server (devtest) after the tests.
func TestMain(m *testing.M) { devtest.Main(m) }

// apiStack is the harness's stack (a dev server, a simulator, a worker) and the API
// over it.
type apiStack struct {
	*stack.Stack
	srv *Server
	api http.Handler
	st  *store.Store
}

func startStack(t *testing.T, edit ...func(*Config)) *apiStack {
	t.Helper()
	return startStackWith(t, nil, nil, edit...)
}

// startAPI is startStack with what most tests then take from it: the contract
// every request and answer is checked against, and the API's handler.
func startAPI(t *testing.T, edit ...func(*Config)) (*contract, *apiStack, http.Handler) {
	t.Helper()
	c := loadContract(t)
	s := startStack(t, edit...)
	return c, s, s.api
}

// startStackWith is startStack with more channels: extra are paritysync's (worker
// and intake), simExtra the simulator's (a Channex channel knows its ids there).
// Every default channel allows 600 requests a minute.
func startStackWith(t *testing.T, extra, simExtra []models.ChannelConfig, edit ...func(*Config)) *apiStack {
	t.Helper()
	// The test's namespace on the package's dev server (devtest: the new matcher with
	// one partition, as the README says every test runs Temporal); skips under -short.
	s := stack.Start(t, "intake", devtest.Start(t), stack.Options{Env: stack.EveryChannel(600),
		Sim: func(c *sim.Config) { c.Channels = append(c.Channels, simExtra...) },
		Worker: []fx.Option{
			fx.Decorate(func(chs []models.ChannelConfig) []models.ChannelConfig { return append(chs, extra...) }),
			// OpenTravel signs in with HTTP Basic user:password.
			fx.Decorate(func(creds channels.Credentials, s config.Settings) channels.Credentials {
				for _, c := range extra {
					if c.Protocol == models.ProtocolOpenTravel {
						creds[c.Slug] = channels.StaticCredential("paritysync:" + s.Token)
					}
				}
				return creds
			}),
		}})

	// The API reads the workers' environment.
	settings, err := config.LoadSettings(s.Getenv)
	require.NoError(t, err)
	chs, err := config.LoadChannels(settings.ChannelsFile, s.Getenv)
	require.NoError(t, err)
	st := s.OpenStore(t)
	keys, err := newKeyring(writeKeys(t), nil)
	require.NoError(t, err)
	cfg := Config{Settings: settings, Channels: append(chs, extra...)}
	for _, e := range edit {
		e(&cfg)
	}
	api, err := NewServer(cfg, s.TC, s.RDB, st, keys, slog.New(slog.NewTextHandler(io.Discard, nil)))
	require.NoError(t, err)
	t.Cleanup(api.Close)
	return &apiStack{Stack: s, srv: api, api: api.Handler(), st: st}
}

// awaitCommitted waits up to wait for the outcome read at path (/v1/changes/{id},
// or a batch's outcomes?mutation={id}) to be one committed outcome, each read
// checked against openapi.yaml.
func awaitCommitted(t *testing.T, c *contract, h http.Handler, path string, wait time.Duration, msgAndArgs ...any) {
	t.Helper()
	require.Eventually(t, func() bool {
		out := decodeJSON[outcomeList](t, c.do(t, h, request(http.MethodGet, path, ""), true))
		return len(out.Outcomes) == 1 && out.Outcomes[0].Outcome == models.OutcomeCommitted
	}, wait, 250*time.Millisecond, msgAndArgs...)
}

func decodeJSON[T any](t *testing.T, resp *http.Response) T {
	t.Helper()
	var v T
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&v))
	return v
}

// mutationRow is a valid mutation line for channel ch on a night a week ahead.
func mutationRow(id, ch string, version int, edit ...string) string {
	day := models.DateOf(time.Now().UTC().AddDate(0, 0, 7))
	row := fmt.Sprintf(`{"id":%q,"property_id":"prop_0000abcd","room_type_code":"DBL","rate_plan_code":"BAR","channel":%q,"stay_date":%q,"inventory":%d,"version":%d}`,
		id, ch, day.String(), version%10, version)
	for i := 0; i+1 < len(edit); i += 2 {
		row = strings.Replace(row, edit[i], edit[i+1], 1)
	}
	return row
}

// TestBatchesAndChangesOverHTTPEveryOutcomeReadBack posts a partly invalid batch
// and webhook changes over the API and reads every outcome back, each request and
// answer checked against openapi.yaml; every operation of the document is used.
func TestBatchesAndChangesOverHTTPEveryOutcomeReadBack(t *testing.T) {
	t.Parallel() // a namespace, task queue, key prefix and schema of its own
	c, _, h := startAPI(t)

	var rows []string
	for i := range 6 {
		rows = append(rows, mutationRow(fmt.Sprintf("b%d", i), "booking_com", i+1, `"room_type_code":"DBL"`, fmt.Sprintf(`"room_type_code":"R%d"`, i)))
	}
	rows = append(rows, mutationRow("bad-currency", "booking_com", 1, `"inventory":1`, `"amount":"10.999","currency":"EUR"`))
	rows = append(rows, mutationRow("bad-type", "booking_com", 1, `"version":1`, `"version":"1"`))
	body := strings.Join(rows, "\n") + "\n"

	post := func(body, key string) *http.Response {
		req := request(http.MethodPost, "/v1/batches", body)
		req.Header.Set("Content-Type", "application/x-ndjson")
		req.Header.Set("Idempotency-Key", key)
		return c.do(t, h, req, false)
	}
	key := "order-" + uuid.NewString()[:8]
	resp := post(body, key)
	require.Equal(t, http.StatusAccepted, resp.StatusCode)
	acc := decodeJSON[batchAccepted](t, resp)
	require.False(t, acc.Attached)
	require.Equal(t, 8, acc.Mutations)
	require.Equal(t, 6, acc.Accepted)
	require.Len(t, acc.Rejected, 2, "both invalid rows are listed: %+v", acc.Rejected)
	require.True(t, strings.HasPrefix(acc.BatchID, "acme."))

	again := decodeJSON[batchAccepted](t, post(body, key))
	require.True(t, again.Attached, "the same key and body name the same batch")
	require.Equal(t, acc.BatchID, again.BatchID)
	resp = post(mutationRow("other", "booking_com", 1)+"\n", key)
	require.Equal(t, http.StatusUnprocessableEntity, resp.StatusCode)
	require.Equal(t, problemBase+probConflict, decodeProblem(t, resp).Type)

	view := awaitBatchDone(t, c, h, acc.StatusURL, 2*time.Minute)
	require.Equal(t, 6, view.Totals.Committed+view.Totals.Superseded, "every valid update has its outcome: %+v", view.Totals)
	require.Equal(t, 2, view.Totals.Rejected)
	require.True(t, view.Planned, "the batch's totals are recorded")
	require.NotNil(t, view.Result, "a done batch carries its result")
	require.Len(t, view.Progress, len(view.Counts), "progress per channel, as counted")
	for i, p := range view.Progress {
		require.Equal(t, view.Counts[i].Channel, p.Channel)
		require.Equal(t, view.Counts[i].Total, p.Total)
		require.Equal(t, p.Total, p.Done, "every update of a done batch has its outcome: %+v", p)
		require.NotNil(t, p.ETASeconds)
		require.Zero(t, *p.ETASeconds)
	}

	listed := decodeJSON[batchList](t, c.do(t, h, request(http.MethodGet, "/v1/batches?state=done&limit=10", ""), true))
	require.Contains(t, listed.ids(), acc.BatchID, "a done batch is listed as done")
	rej := decodeJSON[outcomeList](t, c.do(t, h, request(http.MethodGet, acc.StatusURL+"/rejections", ""), true))
	require.Len(t, rej.Outcomes, 2)
	for _, o := range rej.Outcomes {
		require.Equal(t, models.OutcomeRejected, o.Outcome)
		require.NotEmpty(t, o.Reason)
	}
	for i := range 6 {
		out := decodeJSON[outcomeList](t, c.do(t, h, request(http.MethodGet, fmt.Sprintf("%s/outcomes?mutation=b%d", acc.StatusURL, i), ""), true))
		require.Len(t, out.Outcomes, 1, "b%d", i)
		require.Equal(t, models.OutcomeCommitted, out.Outcomes[0].Outcome)
	}
	finished := decodeJSON[batchAccepted](t, post(body, key))
	require.True(t, finished.Attached, "a finished batch is still the same batch for the same key and body")
	resp = c.do(t, h, request(http.MethodDelete, acc.StatusURL, ""), true)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	resp = c.do(t, h, request(http.MethodGet, "/v1/batches/other.batch", ""), true)
	require.Equal(t, http.StatusNotFound, resp.StatusCode, "another tenant's batch is not found")

	// Webhook changes: accepted ones get outcomes, the invalid one is answered now.
	changes := "[" + strings.Join([]string{
		mutationRow("c1", "expedia", 1), mutationRow("c2", "expedia", 2, `"room_type_code":"DBL"`, `"room_type_code":"TWN"`),
		mutationRow("c3", "agoda", 1), mutationRow("c4", "agoda", 1, `"inventory":1`, `"inventory":1000`),
	}, ",") + "]"
	resp = c.do(t, h, request(http.MethodPost, "/v1/changes", changes), false) // c4 is invalid on purpose
	require.Equal(t, http.StatusAccepted, resp.StatusCode)
	ans := decodeJSON[changesAnswer](t, resp)
	require.Equal(t, 3, ans.Accepted)
	require.Equal(t, 1, ans.Rejected)
	require.Equal(t, "inventory", ans.Changes[3].Problems[0].Field)
	for _, id := range []string{"c1", "c2", "c3"} {
		awaitCommitted(t, c, h, "/v1/changes/"+id, 2*time.Minute, "change %s has its outcome", id)
	}

	// Operations.
	resp = c.do(t, h, request(http.MethodPost, "/v1/channels/agoda/pause", `{"reason":"maintenance"}`), true)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	q := decodeJSON[struct {
		Channels []struct{ Channel, Paused string } `json:"channels"`
	}](t, c.do(t, h, request(http.MethodGet, "/v1/quota?channel=agoda", ""), true))
	require.Contains(t, q.Channels[0].Paused, "maintenance")
	require.Equal(t, http.StatusOK, c.do(t, h, request(http.MethodPost, "/v1/channels/agoda/resume", ""), true).StatusCode)
	require.Equal(t, http.StatusOK, c.do(t, h, request(http.MethodGet, "/v1/dlq?channel=agoda&limit=10", ""), true).StatusCode)
	resp = c.do(t, h, request(http.MethodPost, "/v1/dlq/replay", `{"channel":"agoda"}`), true)
	require.Equal(t, http.StatusAccepted, resp.StatusCode)
	require.Equal(t, http.StatusOK, c.do(t, h, request(http.MethodGet, "/v1/dlq/export?channel=agoda", ""), true).StatusCode)
	require.Equal(t, http.StatusOK, c.do(t, h, request(http.MethodPost, "/v1/dlq/ack", `{"channel":"agoda"}`), true).StatusCode)
	require.Equal(t, http.StatusOK, c.do(t, h, request(http.MethodPut, "/v1/properties/prop_0000abcd/channels", `{"channels":["agoda"]}`), true).StatusCode)
	require.Equal(t, http.StatusOK, c.do(t, h, request(http.MethodGet, "/v1/properties/prop_0000abcd/channels", ""), true).StatusCode)
	require.Equal(t, http.StatusOK, c.do(t, h, request(http.MethodGet, "/v1/lag?property=prop_0000abcd", ""), true).StatusCode)
	for _, path := range []string{"/healthz", "/readyz", "/metrics", "/openapi.yaml", "/v1/schemas/mutation.json"} {
		req := httptest.NewRequest(http.MethodGet, path, nil)
		require.Equal(t, http.StatusOK, c.do(t, h, req, true).StatusCode, path)
	}
	c.exercised(t)
}
