package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/stretchr/testify/require"
)

// checkAnswer validates a real answer to req against openapi.yaml.
func (c *contract) checkAnswer(t *testing.T, req *http.Request, status int, header http.Header, body []byte) {
	t.Helper()
	route, params, err := c.router.FindRoute(req)
	require.NoError(t, err)
	opts := &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc, MultiError: true}
	require.NoError(t, openapi3filter.ValidateResponse(context.Background(), &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route, Options: opts},
		Status:                 status, Header: header, Body: io.NopCloser(bytes.NewReader(body)), Options: opts,
	}), "answer %d to %s %s matches openapi.yaml: %s", status, req.Method, req.URL, body)
}

// TestSIGTERMLetsTheRequestInFlightFinish wires serve to SIGTERM as main does,
// holds a request in the handler, sends the process SIGTERM: the server stops
// accepting connections, the request in flight is answered in full (and matches
// openapi.yaml), and serve returns without error.
func TestSIGTERMLetsTheRequestInFlightFinish(t *testing.T) {
	c := loadContract(t)
	api := offlineServer(t).Handler()
	entered, release := make(chan struct{}), make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" {
			close(entered)
			<-release
		}
		api.ServeHTTP(w, r)
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	served := make(chan error, 1)
	go func() {
		served <- serve(ctx, &http.Server{Handler: h}, ln, 10*time.Second, slog.New(slog.NewTextHandler(io.Discard, nil)))
	}()

	type answer struct {
		req    *http.Request
		resp   *http.Response
		body   []byte
		err    error
		finish time.Time
	}
	got := make(chan answer, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/healthz", nil)
		resp, err := http.DefaultClient.Do(req)
		a := answer{req: req, resp: resp, err: err}
		if err == nil {
			a.body, a.err = io.ReadAll(resp.Body)
			resp.Body.Close()
		}
		a.finish = time.Now()
		got <- a
	}()
	<-entered

	require.NoError(t, syscall.Kill(os.Getpid(), syscall.SIGTERM))
	<-ctx.Done()
	require.Eventually(t, func() bool {
		conn, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			conn.Close()
		}
		return err != nil
	}, 5*time.Second, 20*time.Millisecond, "no new connection is accepted once shutting down")
	select {
	case err := <-served:
		t.Fatalf("serve returned with a request in flight: %v", err)
	default:
	}
	released := time.Now()
	close(release)

	a := <-got
	require.NoError(t, a.err, "the request in flight is answered")
	require.Equal(t, http.StatusOK, a.resp.StatusCode)
	require.False(t, a.finish.Before(released))
	c.checkAnswer(t, a.req, a.resp.StatusCode, a.resp.Header, a.body)
	select {
	case err := <-served:
		require.NoError(t, err, "serve ends cleanly once the request is answered")
	case <-time.After(5 * time.Second):
		t.Fatal("serve did not return after the last request")
	}
}
