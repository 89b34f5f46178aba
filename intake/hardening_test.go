package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/paritysync/paritysync/models"
)

// hugeIDRow is a valid change but for its id of 900,000 characters.
func hugeIDRow() string { return mutationRow(strings.Repeat("x", 900_000), "expedia", 1) }

// TestHostileRowsAreRefusedOnTheirFieldBeforeAnythingStarts posts the rows a
// hostile client sends, on both mutation endpoints: a 900,000-character id, a
// version of 2^63-1, and another tenant's property. Each is refused naming its
// field and rule (the offline server has no Temporal client: nothing can start),
// and a refused id is never echoed back.
func TestHostileRowsAreRefusedOnTheirFieldBeforeAnythingStarts(t *testing.T) {
	c := loadContract(t)
	h := offlineServer(t).Handler()
	cases := []struct {
		name, key, row, field, rule string
	}{
		{"a 900 KB id", testKey, hugeIDRow(), "id", models.RuleIDFormat},
		{"an id with a NUL", testKey, mutationRow("m1", "expedia", 1, `"m1"`, `"m\u0000"`), "id", models.RuleIDFormat},
		{"version 2^63-1", testKey, mutationRow("m1", "expedia", 1, `"version":1`, `"version":9223372036854775807`), "version", models.RuleVersionMax},
		{"another tenant's property", betaKey, mutationRow("m1", "expedia", 1), "property_id", ruleNotOwned},
	}
	for _, tc := range cases {
		t.Run("batch/"+tc.name, func(t *testing.T) {
			resp := c.do(t, h, requestAs(tc.key, http.MethodPost, "/v1/batches", tc.row), false)
			require.Equal(t, http.StatusUnprocessableEntity, resp.StatusCode)
			p := decodeProblem(t, resp)
			require.Len(t, p.Problems, 1, "%+v", p.Problems)
			require.Equal(t, tc.field, p.Problems[0].Field)
			require.Equal(t, tc.rule, p.Problems[0].Rule)
			require.LessOrEqual(t, len(p.Problems[0].ID), models.MaxMutationIDLength)
		})
		t.Run("changes/"+tc.name, func(t *testing.T) {
			resp := c.do(t, h, requestAs(tc.key, http.MethodPost, "/v1/changes", "["+tc.row+"]"), false)
			require.Equal(t, http.StatusAccepted, resp.StatusCode)
			ans := decodeJSON[changesAnswer](t, resp)
			require.Equal(t, 1, ans.Rejected)
			ch := ans.Changes[0]
			require.Equal(t, changeRejected, ch.Status)
			require.Equal(t, tc.field, ch.Problems[0].Field)
			require.Equal(t, tc.rule, ch.Problems[0].Rule)
			require.LessOrEqual(t, len(ch.ID), models.MaxMutationIDLength)
		})
	}
}

// TestKeysFileGivesTenantKeysTheirProperties reads the properties field: a tenant
// key claims the rows of its properties only (globs match), one without the field
// claims none, an operator key claims every row; a bad field is refused naming
// the line.
func TestKeysFileGivesTenantKeysTheirProperties(t *testing.T) {
	keys, err := parseKeys([]byte(keyLine("acme", testKey, roleAdmin) + keyLine("beta", betaKey, betaProperties) +
		keyLine("gamma", "test-key-gamma", "")))
	require.NoError(t, err)
	acme, beta, gamma := keys[0], keys[1], keys[2]
	require.Equal(t, []string{"prop_bbbb0000", "prop_bbbc*"}, beta.properties)
	body := strings.Join([]string{
		mutationRow("r0", "expedia", 1, "prop_0000abcd", "prop_bbbb0000"),
		mutationRow("r1", "expedia", 1, "prop_0000abcd", "prop_bbbc1234"),
		mutationRow("r2", "expedia", 1),
		mutationRow("r3", "expedia", 1, `"inventory":1`, `"inventory":"1"`),
	}, "\n")
	d, err := models.DecodeMutations([]byte(body), models.DecodeLimits{})
	require.NoError(t, err)
	ids := func(d models.Decoded) (kept []string, refused []int) {
		for _, m := range d.Mutations {
			kept = append(kept, m.ID)
		}
		for _, p := range d.Problems {
			refused = append(refused, p.Index)
		}
		return kept, refused
	}
	kept, refused := ids(claim(beta, d))
	require.Equal(t, []string{"r0", "r1"}, kept)
	require.Equal(t, []int{2, 3}, refused, "the other tenant's row joins the problems in body order")
	kept, _ = ids(claim(gamma, d))
	require.Empty(t, kept, "a tenant key without properties writes none")
	kept, _ = ids(claim(acme, d))
	require.Equal(t, []string{"r0", "r1", "r2"}, kept, "an operator key writes every property")

	for line, want := range map[string]string{
		keyLine("beta", betaKey, "properties=prop_[")[:0] + keyLine("beta", betaKey, "properties=prop_["): "property pattern",
		keyLine("beta", betaKey, "properties="):                                                           "property pattern",
		keyLine("beta", betaKey, betaProperties+":"+betaProperties):                                       "give properties= once",
		keyLine("beta", betaKey, "admin:admin"):                                                           "the role, when given",
	} {
		_, err := parseKeys([]byte(line))
		require.ErrorContains(t, err, "line 1: ")
		require.ErrorContains(t, err, want, line)
	}
}

// TestOddRequestsGetAProblemNever500 sends ids with control characters and over
// the bounds in paths and parameters, bodies of other media types, the auth
// scheme in other cases, two Authorization headers and bad Idempotency-Keys:
// each is a 4xx problem, and nothing is logged at ERROR.
func TestOddRequestsGetAProblemNever500(t *testing.T) {
	c := loadContract(t)
	srv := offlineServer(t)
	var logs bytes.Buffer
	srv.log = slog.New(slog.NewTextHandler(&logs, nil))
	h := srv.Handler()
	t.Run("ids off the rules", func(t *testing.T) {
		for path, want := range map[string]int{
			"/v1/batches/acme.%00":                         http.StatusNotFound,
			"/v1/batches/acme.%0a":                         http.StatusNotFound,
			"/v1/batches/acme.a%0ab/rejections":            http.StatusNotFound,
			"/v1/batches/acme." + strings.Repeat("k", 200): http.StatusNotFound,
			"/v1/batches/acme.k1/outcomes?mutation=m%00":   http.StatusBadRequest,
			"/v1/batches/acme.k1/outcomes?mutation=m%0a":   http.StatusBadRequest,
			"/v1/changes/m%00":                             http.StatusNotFound,
			"/v1/changes/m%0a1":                            http.StatusNotFound,
			"/v1/changes/" + strings.Repeat("x", 129):      http.StatusNotFound,
		} {
			resp := c.do(t, h, request(http.MethodGet, path, ""), false)
			require.Equal(t, want, resp.StatusCode, path)
			p := decodeProblem(t, resp)
			if want == http.StatusBadRequest {
				require.Equal(t, "mutation", p.Field, path)
			}
		}
		resp := c.do(t, h, request(http.MethodDelete, "/v1/batches/acme.%00", ""), false)
		require.Equal(t, http.StatusNotFound, resp.StatusCode)
	})
	invalidRow := mutationRow("m1", "expedia", 1, `"version":1`, `"version":0`)
	t.Run("media types", func(t *testing.T) {
		for _, path := range []string{"/v1/batches", "/v1/changes", "/v1/channels/agoda/pause", "/v1/dlq/replay"} {
			for _, ct := range []string{"text/plain", "application/x-www-form-urlencoded", "application/xml", "", "application/json; charset=latin1", "application/json;;"} {
				req := request(http.MethodPost, path, invalidRow)
				req.Header.Set("Content-Type", ct)
				if ct == "" {
					req.Header.Del("Content-Type")
				}
				resp := c.do(t, h, req, false)
				require.Equal(t, http.StatusUnsupportedMediaType, resp.StatusCode, "%s %q", path, ct)
				require.Equal(t, problemBase+probMediaType, decodeProblem(t, resp).Type)
			}
		}
		for _, ct := range []string{"application/json", "application/json; charset=UTF-8", "application/x-ndjson", "application/jsonl", "Application/JSONL"} {
			req := request(http.MethodPost, "/v1/batches", invalidRow)
			req.Header.Set("Content-Type", ct)
			require.Equal(t, http.StatusUnprocessableEntity, c.do(t, h, req, false).StatusCode, "%q is read", ct)
		}
	})
	t.Run("authorization", func(t *testing.T) {
		for _, scheme := range []string{"bearer", "BEARER", "Bearer", "bEaReR"} {
			req := request(http.MethodPost, "/v1/batches", invalidRow)
			req.Header.Set("Authorization", scheme+" "+testKey)
			require.Equal(t, http.StatusUnprocessableEntity, c.do(t, h, req, false).StatusCode, "scheme %q is accepted", scheme)
		}
		req := request(http.MethodPost, "/v1/batches", invalidRow)
		req.Header.Add("Authorization", "Bearer "+testKey)
		resp := c.do(t, h, req, false)
		require.Equal(t, http.StatusUnauthorized, resp.StatusCode, "two Authorization headers are refused")
		require.Contains(t, decodeProblem(t, resp).Detail, "one Authorization header")
	})
	t.Run("idempotency keys", func(t *testing.T) {
		for _, key := range []string{"order 42", "order\x0142", strings.Repeat("k", 256)} {
			req := request(http.MethodPost, "/v1/batches", mutationRow("m1", "expedia", 1))
			req.Header.Set("Idempotency-Key", key)
			resp := c.do(t, h, req, false)
			require.Equal(t, http.StatusBadRequest, resp.StatusCode, "key %q", key)
			p := decodeProblem(t, resp)
			require.Equal(t, "Idempotency-Key", p.Field)
			require.Equal(t, ruleIdempotencyKey, p.Rule)
		}
		req := request(http.MethodPost, "/v1/batches", mutationRow("m1", "expedia", 1))
		req.Header.Add("Idempotency-Key", "a")
		req.Header.Add("Idempotency-Key", "b")
		require.Equal(t, http.StatusBadRequest, c.do(t, h, req, false).StatusCode, "two keys are refused")
	})
	require.NotContains(t, logs.String(), "level=ERROR")
}

// TestASlowBodyIsCutWithinTheBodyDeadline sends a request declaring 100,000 bytes
// one byte every 100 ms over a real connection: it is answered 408 and the
// connection closed once the body falls behind the pace (grace 500 ms here), not
// after the server's two-minute ReadTimeout. A body that keeps the pace is read.
func TestASlowBodyIsCutWithinTheBodyDeadline(t *testing.T) {
	srv := offlineServer(t)
	srv.cfg.BodyGrace, srv.cfg.BodyMinRate = 500*time.Millisecond, 1000
	hs := httptest.NewServer(srv.Handler())
	defer hs.Close()
	conn, err := net.Dial("tcp", hs.Listener.Addr().String())
	require.NoError(t, err)
	defer conn.Close()
	start := time.Now()
	_, err = fmt.Fprintf(conn, "POST /v1/changes HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"+
		"Content-Type: application/json\r\nContent-Length: 100000\r\n\r\n", testKey)
	require.NoError(t, err)
	go func() {
		for range 100 {
			if _, err := conn.Write([]byte(" ")); err != nil {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
	}()
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(10*time.Second)))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusRequestTimeout, resp.StatusCode)
	_, _ = io.Copy(io.Discard, resp.Body)
	elapsed := time.Since(start)
	require.Less(t, elapsed, 3*time.Second, "cut at the body deadline, not the ReadTimeout")
	_, err = conn.Read(make([]byte, 1))
	require.Error(t, err, "the connection is closed")
	t.Logf("a body trickled at 10 B/s was cut after %s", elapsed.Round(10*time.Millisecond))

	// 20 KB at full speed keeps the pace.
	req, err := http.NewRequest(http.MethodPost, hs.URL+"/v1/changes",
		strings.NewReader("["+mutationRow("m1", "expedia", 1, `"version":1`, `"version":0`)+strings.Repeat(" ", 20_000)+"]"))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+testKey)
	req.Header.Set("Content-Type", "application/json")
	ok, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer ok.Body.Close()
	require.Equal(t, http.StatusAccepted, ok.StatusCode)
}

// TestConnectionsAreBoundedPerClientAndInAll opens connections to a limiter of
// 3 in all and 2 per address: the third from one address and the fourth in all
// are closed on accept, counted, and a closed connection frees its place.
func TestConnectionsAreBoundedPerClientAndInAll(t *testing.T) {
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ln := newConnLimiter(tcp, 3, 2)
	defer ln.Close()
	accepted := make(chan net.Conn, 10)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	dial := func(from string) net.Conn {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
		c, err := d.Dial("tcp", tcp.Addr().String())
		require.NoError(t, err)
		t.Cleanup(func() { c.Close() })
		return c
	}
	closedByServer := func(c net.Conn) bool {
		_ = c.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
		_, err := c.Read(make([]byte, 1))
		return err == io.EOF || err != nil && !isTimeout(err)
	}
	a1, a2 := dial("127.0.0.1"), dial("127.0.0.1")
	<-accepted
	second := <-accepted
	require.True(t, closedByServer(dial("127.0.0.1")), "a third connection from one address is closed")
	b1 := dial("127.0.0.2")
	<-accepted
	require.True(t, closedByServer(dial("127.0.0.3")), "a fourth connection in all is closed")
	require.False(t, closedByServer(a1), "the ones within the bounds stay open")
	require.False(t, closedByServer(b1))
	require.Equal(t, int64(2), ln.refused.Load())
	_ = a2
	require.NoError(t, second.Close())
	c := dial("127.0.0.1")
	select {
	case <-accepted:
	case <-time.After(2 * time.Second):
		t.Fatal("a closed connection frees its place")
	}
	require.False(t, closedByServer(c))
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}
