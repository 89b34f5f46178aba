package store

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/paritysync/paritysync/models"
	"github.com/paritysync/paritysync/otasim/sample"
)

func TestBatchPayloadAndChunksSurviveUntilReleased(t *testing.T) {
	ctx := context.Background()
	s := testStore(t)
	batchID := "reconcile/2026-11-30/booking" // slashes in a batch id
	ms := sample.Batch(600, night, 3, 1)
	key, err := s.SaveBatch(ctx, batchID, ms)
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.LoadBatch(ctx, key)
	if err != nil || jsonOf(t, got) != jsonOf(t, ms) {
		t.Fatalf("LoadBatch: %d mutations, %v", len(got), err)
	}

	co := models.Coalesce(ms, nil)
	c := models.Chunk{Channel: co.Requests[0].Channel, Priority: co.Requests[0].Priority, N: 2}
	reqs := co.Requests[:3]
	// A retried PrepareBatch saves the chunk again: the second save replaces the first.
	if _, err := s.SaveChunk(ctx, batchID, c, co.Requests[3:6]); err != nil {
		t.Fatal(err)
	}
	chunkKey, err := s.SaveChunk(ctx, batchID, c, reqs)
	if err != nil {
		t.Fatal(err)
	}
	if want := models.ChannelSyncWorkflowID(batchID, c.Channel, c.Priority, c.N); chunkKey != want {
		t.Errorf("chunk key %q, want %q", chunkKey, want)
	}
	for i, want := range reqs {
		r, err := s.Request(ctx, chunkKey, i)
		if err != nil || r.IdempotencyKey() != want.IdempotencyKey() || len(r.Refs) != len(want.Refs) {
			t.Fatalf("request %d: %v", i, err)
		}
	}
	if _, err := s.Request(ctx, chunkKey, len(reqs)); !errors.Is(err, ErrBatchNotFound) {
		t.Errorf("request past the chunk's end: %v, want ErrBatchNotFound", err)
	}

	if err := s.ReleaseBatch(ctx, batchID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.LoadBatch(ctx, key); !errors.Is(err, ErrBatchNotFound) {
		t.Errorf("released payload: %v, want ErrBatchNotFound", err)
	}
	if _, err := s.Request(ctx, chunkKey, 0); !errors.Is(err, ErrBatchNotFound) {
		t.Errorf("released request: %v, want ErrBatchNotFound", err)
	}
	for _, k := range []string{"paritysync:batch:{x}:mutations", "batch/x"} {
		if _, err := s.Request(ctx, k, 0); !errors.Is(err, ErrBatchNotFound) {
			t.Errorf("Request(%q): %v, want ErrBatchNotFound", k, err)
		}
	}
}

func jsonOf(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestParseChunkKey(t *testing.T) {
	for key, want := range map[string]chunkRef{
		"batch/b1/booking/p1/0":        {"b1", "booking", 1, 0},
		"batch/a/b/c/expedia/p5/12":    {"a/b/c", "expedia", 5, 12},
		"batch/reconcile/x/agoda/p3/7": {"reconcile/x", "agoda", 3, 7},
	} {
		got, err := parseChunkKey(key)
		if err != nil || got != want {
			t.Errorf("%s: %+v, %v; want %+v", key, got, err, want)
		}
	}
	for _, bad := range []string{"", "batch/", "batch/b/booking/1/0", "batch/b/booking/px/0", "chunk/b/booking/p1/0"} {
		if _, err := parseChunkKey(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

func TestPruneDeletesWhatOutlivedItsRetention(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2027, 3, 1, 12, 0, 0, 0, time.UTC)
	clock := now.AddDate(0, 0, -40)
	s := testStore(t, WithClock(func() time.Time { return clock }))
	old := price("old", 1, "80", 0) // night 2026-12-24: more than 35 days before now
	if _, err := s.RecordDesired(ctx, []models.Mutation{old}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.RecordAcknowledged(ctx, Ack{BatchID: "old", Request: requestOf(t, old), ConfirmationID: "c"}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.ParkDeadLetter(ctx, DeadLetter{BatchID: "old", Reason: "auth", Request: requestOf(t, price("p", 1, "1", 1))}); err != nil {
		t.Fatal(err)
	}
	open, _, err := s.ParkDeadLetter(ctx, DeadLetter{BatchID: "old", Reason: "auth", Request: requestOf(t, price("q", 1, "1", 2))})
	if err != nil {
		t.Fatal(err)
	}
	ds, _ := s.DeadLetters(ctx, DeadLetterFilter{})
	if _, err := s.AckDeadLetters(ctx, []int64{ds[0].ID}, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := s.SaveBatch(ctx, "old", []models.Mutation{old}); err != nil {
		t.Fatal(err)
	}
	clock = now
	fresh := old
	fresh.ID, fresh.StayDate = "fresh", models.DateOf(now).AddDays(3)
	if _, err := s.RecordDesired(ctx, []models.Mutation{fresh}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.SaveBatch(ctx, "new", []models.Mutation{fresh}); err != nil {
		t.Fatal(err)
	}

	p, err := s.Prune(ctx, DefaultRetention())
	if err != nil {
		t.Fatal(err)
	}
	// The old night (rates, from desired and ack) and its confirmation; the old batch
	// with its outcome; the acknowledged dead letter. The open one stays.
	if p.Cells != 1 || p.Confirmations != 1 || p.Batches != 1 || p.DeadLetters != 1 || p.Payloads != 1 {
		t.Errorf("pruned %+v", p)
	}
	if _, err := s.LoadBatch(ctx, models.BatchWorkflowID("new")); err != nil {
		t.Errorf("the new batch's payload was pruned: %v", err)
	}
	if _, err := s.DeadLetter(ctx, open); err != nil {
		t.Errorf("an open dead letter was pruned: %v", err)
	}
	if n := rowCount(t, s, "cells"); n != 1 {
		t.Errorf("%d cells left, want 1", n)
	}
}
