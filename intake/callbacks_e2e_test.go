package main

import (
	"crypto/hmac"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	historypb "go.temporal.io/api/history/v1"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/paritysync/paritysync/models"
)

// receivedCallback is one POST a test receiver got.
type receivedCallback struct {
	path, eventID, timestamp, signature string
	body                                []byte
}

// callbackReceiver records every POST; a path in failFirst answers its first POST 500.
type callbackReceiver struct {
	mu        sync.Mutex
	got       []receivedCallback
	failFirst map[string]bool
}

func (rc *callbackReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.got = append(rc.got, receivedCallback{path: r.URL.Path, eventID: r.Header.Get(headerEventID),
		timestamp: r.Header.Get(headerTimestamp), signature: r.Header.Get(headerSignature), body: body})
	if rc.failFirst[r.URL.Path] {
		rc.failFirst[r.URL.Path] = false
		http.Error(w, "receiver down", http.StatusInternalServerError)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// on is every POST the receiver got on path.
func (rc *callbackReceiver) on(path string) []receivedCallback {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	var out []receivedCallback
	for _, g := range rc.got {
		if g.path == path {
			out = append(out, g)
		}
	}
	return out
}

// testCallbackSecret is acme's callback secret in the callback tests.
const testCallbackSecret = "acme-callback-secret-0123456789"

// receiveCallbacks serves rc for the test.
func receiveCallbacks(t *testing.T, rc *callbackReceiver) *httptest.Server {
	recv := httptest.NewServer(rc)
	t.Cleanup(recv.Close)
	return recv
}

// decodeCallback checks a callback body against schema of openapi.yaml and
// decodes it.
func decodeCallback[T any](t *testing.T, c *contract, schema string, body []byte) T {
	t.Helper()
	var v any
	require.NoError(t, json.Unmarshal(body, &v))
	require.NoError(t, c.doc.Components.Schemas[schema].Value.VisitJSON(v), "the body matches %s: %s", schema, body)
	var ev T
	require.NoError(t, json.Unmarshal(body, &ev))
	return ev
}

// withCallbacks lets the stack's intake call acme back at the URLs under
// receiver/hooks/, signed with the secret in a file holding secretFile, and
// deliver at a test's pace.
func withCallbacks(t *testing.T, receiver, secretFile string) func(*Config) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "secret"), []byte(secretFile), 0o600))
	file := filepath.Join(dir, "callbacks.yaml")
	require.NoError(t, os.WriteFile(file, []byte("tenants:\n  acme:\n    secret_file: "+filepath.Join(dir, "secret")+
		"\n    allow:\n      - "+receiver+"/hooks/\n"), 0o600))
	cbs, err := loadCallbacks(file)
	require.NoError(t, err)
	return func(cfg *Config) {
		cfg.Callbacks, cfg.CallbackPoll, cfg.CallbackBackoff = cbs, 50*time.Millisecond, 200*time.Millisecond
	}
}

// TestCompletionCallbackIsSignedDeliveredOnceAndRetriedWithTheSameEventID posts
// two batches naming a callback URL on a local receiver (allowed by the test-only
// loopback entry of the callbacks file): the one whose receiver answers 2xx gets
// exactly one signed POST; the one whose receiver answers 500 first gets a second
// delivery carrying the same event id and body, and nothing after. Each body
// matches openapi.yaml's BatchEnded and each signature verifies with the tenant's
// secret; a URL off the allow-list is a 400 naming callback_url.
func TestCompletionCallbackIsSignedDeliveredOnceAndRetriedWithTheSameEventID(t *testing.T) {
	t.Parallel()
	rc := &callbackReceiver{failFirst: map[string]bool{"/hooks/flaky": true}}
	recv := receiveCallbacks(t, rc)
	secret := testCallbackSecret
	c, s, h := startAPI(t, withCallbacks(t, recv.URL, secret+"\n"))

	post := func(path, id string) batchAccepted {
		t.Helper()
		req := request(http.MethodPost, "/v1/batches?callback_url="+url.QueryEscape(recv.URL+path), "["+mutationRow(id, "expedia", 1)+"]")
		resp := c.do(t, h, req, true)
		require.Equal(t, http.StatusAccepted, resp.StatusCode)
		return decodeJSON[batchAccepted](t, resp)
	}
	ok, flaky := post("/hooks/ok", "cb1"), post("/hooks/flaky", "cb2")

	verify := func(g receivedCallback, batchID string) models.BatchEndedEvent {
		t.Helper()
		require.Equal(t, signCallback([]byte(secret), g.timestamp, g.body), g.signature, "signed over timestamp.body")
		require.True(t, hmac.Equal([]byte(g.signature), []byte(signCallback([]byte(secret), g.timestamp, g.body))))
		ts, err := strconv.ParseInt(g.timestamp, 10, 64)
		require.NoError(t, err)
		require.WithinDuration(t, time.Now(), time.Unix(ts, 0), time.Minute)
		ev := decodeCallback[models.BatchEndedEvent](t, c, "BatchEnded", g.body)
		require.Equal(t, batchID, ev.BatchID)
		require.Equal(t, g.eventID, ev.EventID)
		require.Equal(t, "done", ev.State)
		require.Equal(t, 1, ev.Counts.Committed, "%s", g.body)
		return ev
	}
	require.Eventually(t, func() bool { return len(rc.on("/hooks/flaky")) >= 2 && len(rc.on("/hooks/ok")) >= 1 },
		2*time.Minute, 100*time.Millisecond, "both callbacks delivered")
	verify(rc.on("/hooks/ok")[0], ok.BatchID)
	first, second := rc.on("/hooks/flaky")[0], rc.on("/hooks/flaky")[1]
	verify(first, flaky.BatchID)
	verify(second, flaky.BatchID)
	require.Equal(t, first.eventID, second.eventID, "a redelivery carries the same event id")
	require.Equal(t, first.body, second.body)

	// Delivered is recorded: nothing more comes (the loop polls every 50 ms).
	require.Eventually(t, func() bool {
		st, found, err := s.st.CallbackOf(t.Context(), flaky.BatchID)
		require.NoError(t, err)
		return found && st.Delivered && st.Attempts == 2
	}, 10*time.Second, 50*time.Millisecond)
	if os.Getenv("PARITYSYNC_RECORD_HISTORY") != "" {
		// The replay test's history of a batch that records its end with a callback.
		var h historypb.History
		iter := s.TC.GetWorkflowHistory(t.Context(), models.BatchWorkflowID(flaky.BatchID), "", false, 0)
		for iter.HasNext() {
			e, err := iter.Next()
			require.NoError(t, err)
			h.Events = append(h.Events, e)
		}
		b, err := protojson.MarshalOptions{Indent: "  "}.Marshal(&h)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join("..", "workflows", "testdata", "batchsync_finish.json"), b, 0o644))
	}
	time.Sleep(time.Second)
	require.Len(t, rc.on("/hooks/ok"), 1, "exactly one callback")
	require.Len(t, rc.on("/hooks/flaky"), 2, "one failed delivery and one delivered, no more")

	for _, bad := range []string{"https://evil.example/hooks/", recv.URL + "/other", "http://user:pw@127.0.0.1/hooks/", recv.URL + "/hooks/ok?token=abc"} {
		req := request(http.MethodPost, "/v1/batches?callback_url="+url.QueryEscape(bad), "["+mutationRow("cb3", "expedia", 1)+"]")
		resp := c.do(t, h, req, true)
		require.Equal(t, http.StatusBadRequest, resp.StatusCode, bad)
		require.Equal(t, "callback_url", decodeProblem(t, resp).Field, bad)
	}
	resp := c.do(t, h, requestAs(betaKey, http.MethodPost, "/v1/batches?callback_url="+url.QueryEscape(recv.URL+"/hooks/ok"),
		"["+mutationRow("cb4", "expedia", 1, "prop_0000abcd", "prop_bbbb0000")+"]"), true)
	require.Equal(t, http.StatusBadRequest, resp.StatusCode, "another tenant's allow-list is not beta's")
}

// TestCallbacksFileRefusesPlainHTTPOffLoopback holds the allow-list's rule: https,
// or http on a loopback address only.
func TestCallbacksFileRefusesPlainHTTPOffLoopback(t *testing.T) {
	require.NoError(t, checkAllowEntry("https://pms.example/hooks/"))
	require.NoError(t, checkAllowEntry("http://127.0.0.1:9999/hooks/"))
	require.NoError(t, checkAllowEntry("http://[::1]:9999/hooks/"))
	require.Error(t, checkAllowEntry("http://pms.example/hooks/"))
	require.Error(t, checkAllowEntry("http://localhost/hooks/"), "a name could resolve anywhere")
	require.Error(t, checkAllowEntry("ftp://pms.example/"))
	require.Error(t, checkAllowEntry("https://user:pw@pms.example/"))
}
