package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/paritysync/paritysync/config"
	"github.com/paritysync/paritysync/models"
)

// contract checks every request a test sends and every answer it gets against
// openapi.yaml, and remembers which operations were exercised.
type contract struct {
	doc    *openapi3.T
	router routers.Router
	mu     sync.Mutex
	seen   map[string]bool
}

func loadContract(t *testing.T) *contract {
	t.Helper()
	loader := openapi3.NewLoader()
	loader.IsExternalRefsAllowed = true
	loader.ReadFromURIFunc = func(_ *openapi3.Loader, u *url.URL) ([]byte, error) {
		if strings.HasSuffix(u.Path, "v1/schemas/mutation.json") {
			return models.MutationSchema(), nil
		}
		return os.ReadFile(filepath.Clean(u.Path))
	}
	doc, err := loader.LoadFromDataWithPath(openAPIDocument, &url.URL{Path: "openapi.yaml"})
	require.NoError(t, err, "load openapi.yaml")
	require.True(t, doc.IsOpenAPI31OrLater())
	require.NoError(t, doc.Validate(loader.Context), "openapi.yaml is a valid document")
	doc.Servers = nil // match any host
	router, err := gorillamux.NewRouter(doc)
	require.NoError(t, err)
	openapi3filter.RegisterBodyDecoder("application/x-ndjson", ndjsonDecoder)
	openapi3filter.RegisterBodyDecoder("application/jsonl", ndjsonDecoder)
	openapi3filter.RegisterBodyDecoder("application/problem+json", openapi3filter.JSONBodyDecoder)
	openapi3filter.RegisterBodyDecoder("application/schema+json", openapi3filter.JSONBodyDecoder)
	openapi3filter.RegisterBodyDecoder("application/yaml", openapi3filter.FileBodyDecoder)
	return &contract{doc: doc, router: router, seen: map[string]bool{}}
}

// ndjsonDecoder reads JSON lines as an array, so the body's schema applies to it.
func ndjsonDecoder(body io.Reader, _ http.Header, _ *openapi3.SchemaRef, _ openapi3filter.EncodingFn) (any, error) {
	var out []any
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 64<<10), 8<<20)
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		var v any
		if err := json.Unmarshal(line, &v); err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, sc.Err()
}

// do sends req to h, validates the request (when validRequest) and always the
// answer against the document, and returns the answer.
func (c *contract) do(t *testing.T, h http.Handler, req *http.Request, validRequest bool) *http.Response {
	t.Helper()
	var body []byte
	if req.Body != nil {
		body, _ = io.ReadAll(req.Body)
		req.Body = io.NopCloser(bytes.NewReader(body))
	}
	route, params, err := c.router.FindRoute(req)
	require.NoError(t, err, "%s %s is in openapi.yaml", req.Method, req.URL.Path)
	c.mu.Lock()
	c.seen[route.Operation.OperationID] = true
	c.mu.Unlock()
	opts := &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc, MultiError: true}
	in := &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route, Options: opts}
	if validRequest {
		check := req.Clone(context.Background())
		check.Body = io.NopCloser(bytes.NewReader(body))
		in.Request = check
		require.NoError(t, openapi3filter.ValidateRequest(context.Background(), in), "request %s %s matches openapi.yaml", req.Method, req.URL)
		in.Request = req
	}
	rec := httptest.NewRecorder()
	req.Body = io.NopCloser(bytes.NewReader(body))
	h.ServeHTTP(rec, req)
	resp := rec.Result()
	out, _ := io.ReadAll(resp.Body)
	resp.Body = io.NopCloser(bytes.NewReader(out))
	require.NoError(t, openapi3filter.ValidateResponse(context.Background(), &openapi3filter.ResponseValidationInput{
		RequestValidationInput: in, Status: resp.StatusCode, Header: resp.Header, Body: io.NopCloser(bytes.NewReader(out)),
		Options: opts,
	}), "answer %d to %s %s matches openapi.yaml: %s", resp.StatusCode, req.Method, req.URL, out)
	return resp
}

// exercised fails for every operation of the document no test sent a request to.
func (c *contract) exercised(t *testing.T) {
	t.Helper()
	for path, item := range c.doc.Paths.Map() {
		for method, op := range item.Operations() {
			if !c.seen[op.OperationID] {
				t.Errorf("%s %s (%s): no test exercises it", method, path, op.OperationID)
			}
		}
	}
}

// testKey is the API key of tenant "acme" in the tests, an operator key (role
// admin); betaKey is tenant "beta"'s, a plain tenant key that writes the
// properties betaProperties matches (not the tests' usual prop_0000abcd).
const (
	testKey = "test-key-acme"
	betaKey = "test-key-beta"
	// betaProperties is beta's properties field.
	betaProperties = "properties=prop_bbbb0000,prop_bbbc*"
)

// keyLine is a keys-file line for key.
func keyLine(tenant, key, role string) string {
	sum := sha256.Sum256([]byte(key))
	line := tenant + ":" + hex.EncodeToString(sum[:])
	if role != "" {
		line += ":" + role
	}
	return line + "\n"
}

// writeKeys writes a keys file for tenants acme (admin) and beta and returns its path.
func writeKeys(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "keys")
	body := "# tenants\n" + keyLine("acme", testKey, roleAdmin) + keyLine("beta", betaKey, betaProperties)
	require.NoError(t, os.WriteFile(path, []byte(body), 0o600))
	return path
}

func request(method, path, body string) *http.Request {
	return requestAs(testKey, method, path, body)
}

// awaitBatchDone reads the batch at statusURL (each answer checked against
// openapi.yaml) until it is done, at most for within, and returns its view then.
func awaitBatchDone(t *testing.T, c *contract, h http.Handler, statusURL string, within time.Duration, msgAndArgs ...any) batchView {
	t.Helper()
	var view batchView
	require.Eventually(t, func() bool {
		view = decodeJSON[batchView](t, c.do(t, h, request(http.MethodGet, statusURL, ""), true))
		return view.State == "done"
	}, within, 250*time.Millisecond, msgAndArgs...)
	return view
}

func requestAs(key, method, path, body string) *http.Request {
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req := httptest.NewRequest(method, path, r)
	req.Header.Set("Authorization", "Bearer "+key)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	return req
}

func decodeProblem(t *testing.T, resp *http.Response) problem {
	t.Helper()
	require.Equal(t, "application/problem+json", resp.Header.Get("Content-Type"))
	var p problem
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&p))
	return p
}

// offlineServer is a server with no Temporal client: enough for the answers that
// are decided before anything is started.
func offlineServer(t *testing.T) *Server {
	t.Helper()
	return serverWith(t, writeKeys(t), nil, "")
}

// serverWith is a server with the keys file keysPath and, when rdb is set, the
// limiter on it under prefix; no Temporal client and no store.
func serverWith(t *testing.T, keysPath string, rdb redis.UniversalClient, prefix string) *Server {
	t.Helper()
	keys, err := newKeyring(keysPath, nil)
	require.NoError(t, err)
	chs, err := config.LoadChannels("", func(string) string { return "" })
	require.NoError(t, err)
	set := config.DefaultSettings()
	if prefix != "" {
		set.KeyPrefix = prefix
	}
	s, err := NewServer(Config{Settings: set, Channels: chs, MaxBatchBody: 8 << 20},
		nil, rdb, nil, keys, slog.New(slog.NewTextHandler(io.Discard, nil)))
	require.NoError(t, err)
	return s
}

func TestUnauthenticatedRequestsAreAnswered401WithWWWAuthenticate(t *testing.T) {
	c := loadContract(t)
	h := offlineServer(t).Handler()
	for _, auth := range []string{"", "Bearer ", "Bearer wrong", "Basic " + testKey} {
		req := request(http.MethodGet, "/v1/quota", "")
		req.Header.Set("Authorization", auth)
		resp := c.do(t, h, req, false)
		require.Equal(t, http.StatusUnauthorized, resp.StatusCode, "Authorization %q", auth)
		require.Equal(t, `Bearer realm="paritysync"`, resp.Header.Get("WWW-Authenticate"))
		require.Equal(t, probUnauthorized, strings.TrimPrefix(decodeProblem(t, resp).Type, problemBase))
	}
}

// TestUnreadableBodiesNameLineAndRule posts the kinds of bad body to both mutation
// endpoints: each is a 400 (or 413) problem naming the line and rule, and nothing
// is started (the offline server has no Temporal client to start anything with).
func TestUnreadableBodiesNameLineAndRule(t *testing.T) {
	c := loadContract(t)
	h := offlineServer(t).Handler()
	row := `{"id":"m1","property_id":"prop_0000abcd","room_type_code":"DBL","rate_plan_code":"BAR","channel":"booking_com","stay_date":"2099-01-01","inventory":3,"version":1}`
	cases := []struct {
		name, body string
		line       int
		rule       string
	}{
		{"empty body", "", 0, models.RuleBodyEmpty},
		{"white space only", " \r\n\t", 0, models.RuleBodyEmpty},
		{"trailing garbage after the array", "[" + row + "]garbage", 1, models.RuleBodyTrailing},
		{"cut-off array", "[" + row + ",\n" + row[:40], 2, models.RuleBodyJSON},
		{"not UTF-8", "[" + row + ",\n\xff]", 2, models.RuleBodyUTF8},
		{"a number", "42", 1, models.RuleBodyShape},
		{"two values on a line", row + " " + row + "\n", 1, models.RuleOneValuePerLine},
	}
	for _, path := range []string{"/v1/batches", "/v1/changes"} {
		for _, tc := range cases {
			t.Run(path+"/"+tc.name, func(t *testing.T) {
				resp := c.do(t, h, request(http.MethodPost, path, tc.body), false)
				require.Equal(t, http.StatusBadRequest, resp.StatusCode)
				p := decodeProblem(t, resp)
				require.Equal(t, problemBase+probUnreadable, p.Type)
				require.Equal(t, tc.rule, p.Rule, p.Detail)
				require.Equal(t, tc.line, p.Line, p.Detail)
			})
		}
	}
	t.Run("a body over the limit is 413", func(t *testing.T) {
		big := "[" + row + "," + strings.Repeat(" ", 2<<20) + row + "]"
		resp := c.do(t, h, request(http.MethodPost, "/v1/changes", big), false)
		require.Equal(t, http.StatusRequestEntityTooLarge, resp.StatusCode)
		require.Equal(t, problemBase+probTooLarge, decodeProblem(t, resp).Type)
	})
	t.Run("a batch whose every row is invalid is 422 naming each field and rule", func(t *testing.T) {
		body := strings.Join([]string{
			strings.Replace(row, `"inventory":3`, `"inventory":"3"`, 1),                                                        // wrong type
			strings.Replace(row, `"m1"`, `"m2"`, 1)[:len(row)-1] + `,"colour":"red"}`,                                          // unknown field
			strings.Replace(strings.Replace(row, `"m1"`, `"m3"`, 1), `"inventory":3`, `"amount":"12.345","currency":"EUR"`, 1), // minor units
		}, "\r\n")
		resp := c.do(t, h, request(http.MethodPost, "/v1/batches", "\ufeff"+body), false)
		require.Equal(t, http.StatusUnprocessableEntity, resp.StatusCode)
		p := decodeProblem(t, resp)
		got := map[string]bool{}
		for _, rp := range p.Problems {
			got[rp.Field+" "+rp.Rule] = true
		}
		require.True(t, got["inventory "+models.RuleJSONInteger], "%+v", p.Problems)
		require.True(t, got["colour "+models.RuleUnknownField], "%+v", p.Problems)
		require.True(t, got["amount "+models.RuleAmountPlaces], "%+v", p.Problems)
	})
}
