package store

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/paritysync/paritysync/models"
)

func TestParkDeadLetterParksOnceWithOutcomes(t *testing.T) {
	ctx := context.Background()
	at := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	s := testStore(t, WithClock(func() time.Time { return at }))
	r := requestOf(t, price("a", 3, "80", 0), price("b", 3, "90", 2))
	d := DeadLetter{BatchID: "batch/x", Reason: models.ReasonRejected, Status: 400, Message: "rate plan unknown", Request: r}
	id, parked, err := s.ParkDeadLetter(ctx, d)
	if err != nil || !parked {
		t.Fatalf("first park: %d %v %v", id, parked, err)
	}
	again, parked, err := s.ParkDeadLetter(ctx, d)
	if err != nil || parked || again != id {
		t.Fatalf("retried park: id %d parked %v err %v; want id %d, not parked", again, parked, err, id)
	}
	got, err := s.DeadLetter(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if got.Channel != "booking" || got.PropertyID != "prop_0000abcd" || got.Family != models.FamilyRates ||
		got.Status != 400 || got.Message != "rate plan unknown" || !got.ParkedAt.Equal(at) || !got.AckedAt.IsZero() ||
		fmt.Sprint(got.MutationIDs) != "[a b]" || fmt.Sprint(got.StayDates) != "[2026-12-24 2026-12-26]" ||
		got.Request.IdempotencyKey() != r.IdempotencyKey() {
		t.Errorf("dead letter read back: %+v", got)
	}
	counts, err := s.BatchCounts(ctx, "batch/x")
	if err != nil || len(counts) != 1 || counts[0].DeadLettered != 2 || counts[0].Total != 2 {
		t.Fatalf("counts %+v, %v; want 2 dead-lettered", counts, err)
	}
	o, _ := s.Outcomes(ctx, "batch/x", "a")
	if len(o) != 1 || o[0].Reason != models.ReasonRejected {
		t.Errorf("outcome of a: %+v", o)
	}
	if _, err := s.DeadLetter(ctx, id+100); !errors.Is(err, ErrDeadLetterNotFound) {
		t.Errorf("missing dead letter: %v", err)
	}
}

func TestDeadLettersFilterAckAndReplay(t *testing.T) {
	ctx := context.Background()
	s := testStore(t)
	park := func(batch, reason string, m models.Mutation) int64 {
		t.Helper()
		id, _, err := s.ParkDeadLetter(ctx, DeadLetter{BatchID: batch, Reason: reason, Request: requestOf(t, m)})
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	other := price("e", 1, "50", 0)
	other.Channel = "expedia"
	auth := park("b1", models.ReasonAuth, price("a", 1, "80", 0))
	rejected := park("b1", models.ReasonRejected, price("b", 1, "81", 1))
	later := park("b2", models.ReasonRejected, price("c", 1, "82", 2))
	exp := park("b2", models.ReasonRejected, other)

	list := func(f DeadLetterFilter) []int64 {
		t.Helper()
		ds, err := s.DeadLetters(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		var ids []int64
		for _, d := range ds {
			ids = append(ids, d.ID)
		}
		return ids
	}
	for _, c := range []struct {
		f    DeadLetterFilter
		want []int64
	}{
		{DeadLetterFilter{}, []int64{auth, rejected, later, exp}},
		{DeadLetterFilter{Channel: "booking"}, []int64{auth, rejected, later}},
		{DeadLetterFilter{Reason: models.ReasonRejected, Channel: "booking"}, []int64{rejected, later}},
		{DeadLetterFilter{BatchID: "b2"}, []int64{later, exp}},
		{DeadLetterFilter{AfterID: rejected, Limit: 1}, []int64{later}},
	} {
		if got := list(c.f); fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Errorf("%+v: got %v, want %v", c.f, got, c.want)
		}
	}

	d, err := s.DeadLetter(ctx, rejected)
	if err != nil {
		t.Fatal(err)
	}
	replay := d.Mutations()
	if len(replay) != 1 || replay[0].ID != "b" || replay[0].Version != 1 || replay[0].Amount.String() != "81" ||
		replay[0].StayDate != night.AddDays(1) || replay[0].Channel != "booking" {
		t.Fatalf("replay mutations: %+v", replay)
	}
	if n, err := s.AckDeadLetters(ctx, []int64{auth, rejected}, "replayed as batch r1"); err != nil || n != 2 {
		t.Fatalf("ack: %d, %v", n, err)
	}
	if n, _ := s.AckDeadLetters(ctx, []int64{auth}, "again"); n != 0 {
		t.Errorf("acked twice: %d", n)
	}
	if got := list(DeadLetterFilter{Channel: "booking"}); fmt.Sprint(got) != fmt.Sprint([]int64{later}) {
		t.Errorf("open after ack: %v", got)
	}
	if got := list(DeadLetterFilter{Channel: "booking", Acked: true}); len(got) != 3 {
		t.Errorf("with acked: %v", got)
	}
	if d, _ := s.DeadLetter(ctx, auth); d.AckNote != "replayed as batch r1" || d.AckedAt.IsZero() {
		t.Errorf("acked entry: %+v", d)
	}
}
