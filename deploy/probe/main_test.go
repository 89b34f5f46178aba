package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestProbeWantsA2xxAnswer(t *testing.T) {
	status := http.StatusOK
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(status) }))
	defer srv.Close()
	if err := probe(context.Background(), srv.URL); err != nil {
		t.Fatalf("200: %v", err)
	}
	status = http.StatusServiceUnavailable
	if err := probe(context.Background(), srv.URL); err == nil {
		t.Fatal("503 passed the probe")
	}
	if err := probe(context.Background(), "http://127.0.0.1:1/healthz"); err == nil {
		t.Fatal("a closed port passed the probe")
	}
}
