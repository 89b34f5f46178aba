package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"

	"github.com/paritysync/paritysync/activities"
	"github.com/paritysync/paritysync/activities/store"
	"github.com/paritysync/paritysync/activities/store/storetest"
	"github.com/paritysync/paritysync/channels"
	"github.com/paritysync/paritysync/config"
	"github.com/paritysync/paritysync/dial/devtest"
	"github.com/paritysync/paritysync/dial/redistest"
	"github.com/paritysync/paritysync/limiter"
	"github.com/paritysync/paritysync/models"
	"github.com/paritysync/paritysync/otasim/sim"
	"github.com/paritysync/paritysync/workflows"
)

// The end-to-end test runs the API on real parts, as worker/e2e_test.go does: a
// Temporal dev server (TEMPORAL_CLI, or ../.bin/temporal), the Redis at REDIS_URL
// under a key prefix of its own, a PostgreSQL schema of its own, the simulator over
// HTTP and an in-process worker.

// TestMain stops the package's one dev server (devtest) after the tests.
func TestMain(m *testing.M) { devtest.Main(m) }

// stack is a dev server, a simulator, a worker and the API over them.
type stack struct {
	srv    *Server
	api    http.Handler
	st     *store.Store
	tc     client.Client
	rdb    *redis.Client
	prefix string
	queue  string
	// ns is the test's namespace on the dev server, dbURL its PostgreSQL schema.
	ns    string
	dbURL string
	// sim is the channel simulator the worker pushes to.
	sim *sim.Simulator
}

func startStack(t *testing.T, edit ...func(*Config)) *stack {
	t.Helper()
	return startStackWith(t, nil, nil, edit...)
}

// startAPI is startStack with what most tests then take from it: the contract
// every request and answer is checked against, and the API's handler.
func startAPI(t *testing.T, edit ...func(*Config)) (*contract, *stack, http.Handler) {
	t.Helper()
	c := loadContract(t)
	s := startStack(t, edit...)
	return c, s, s.api
}

// startStackWith is startStack with more channels: extra are paritysync's (worker
// and intake), simExtra the simulator's (a Channex channel knows its ids there).
func startStackWith(t *testing.T, extra, simExtra []models.ChannelConfig, edit ...func(*Config)) *stack {
	t.Helper()
	ctx := context.Background()
	// The test's namespace on the package's dev server (devtest: the new matcher with
	// one partition, as the README says every test runs Temporal); skips under -short.
	srv := devtest.Start(t)

	rdb, prefix := redistest.Client(t, "paritysync-intake")
	redisURL, queue := redistest.URL(), strings.TrimSuffix(prefix, ":")
	s := config.DefaultSettings()
	s.TemporalAddress, s.TemporalNamespace, s.TaskQueue, s.KeyPrefix, s.RedisURL = srv.FrontendHostPort(), srv.Namespace(), queue, prefix, redisURL
	s.DatabaseURL = storetest.Schema(t, "intake")
	chs, err := config.LoadChannels("", func(k string) string {
		if strings.HasSuffix(k, "_RATE_PER_MINUTE") {
			return "600"
		}
		return ""
	})
	require.NoError(t, err)
	simChannels := append(slices.Clone(chs), simExtra...)
	chs = append(chs, extra...)
	simulator := sim.New(sim.Config{Channels: simChannels, StaticTokens: []string{"e2e-token"}})
	simSrv := httptest.NewServer(simulator)
	t.Cleanup(func() { simSrv.Close(); simulator.Close() })

	st, err := store.Open(ctx, s.DatabaseURL)
	require.NoError(t, err)
	t.Cleanup(st.Close)
	require.NoError(t, st.Migrate(ctx))
	lim := limiter.New(rdb, chs, limiter.Options{Prefix: prefix, Lease: 15 * time.Second})
	creds := channels.Credentials{}
	for _, c := range chs {
		creds[c.Slug] = channels.StaticCredential("e2e-token")
		if c.Protocol == models.ProtocolOpenTravel {
			creds[c.Slug] = channels.StaticCredential("paritysync:e2e-token") // Basic user:password
		}
	}
	v, err := models.NewValidator(chs, s.PropertyPattern, time.Now)
	require.NoError(t, err)
	// As the worker's app wires it: the codes stored over the API are read through
	// a cache, so a property mapped while the worker runs is pushed.
	mappings := st.NewMappings(chs, 0)
	cc := channels.New(http.DefaultClient, simSrv.URL, creds, chs, 10*time.Second)
	cc.UseConfigs(mappings.ChannelFor)
	acts := &activities.Activities{Limiter: lim, Client: cc,
		Tokens: creds, Store: st, Channels: models.ChannelMap(chs), Validator: v, Mappings: mappings, ChunkSize: 5,
		Metrics: activities.NewMetrics(prometheus.NewRegistry())}
	tc := srv.Client()
	w := worker.New(tc, queue, worker.Options{})
	w.RegisterWorkflow(workflows.BatchSync)
	w.RegisterWorkflow(workflows.ChannelSync)
	w.RegisterWorkflow(workflows.BurstSmoother)
	w.RegisterActivity(acts)
	require.NoError(t, w.Start())
	t.Cleanup(w.Stop)

	keys, err := newKeyring(writeKeys(t), nil)
	require.NoError(t, err)
	cfg := Config{Settings: s, Channels: chs}
	for _, e := range edit {
		e(&cfg)
	}
	api, err := NewServer(cfg, tc, rdb, st, keys, slog.New(slog.NewTextHandler(io.Discard, nil)))
	require.NoError(t, err)
	t.Cleanup(api.Close)
	return &stack{srv: api, api: api.Handler(), st: st, tc: tc, rdb: rdb, prefix: prefix, queue: queue,
		ns: srv.Namespace(), dbURL: s.DatabaseURL, sim: simulator}
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
