package store

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/paritysync/paritysync/models"
)

func TestTheSameOutcomeWrittenTwiceConcurrentlyIsRecordedOnce(t *testing.T) {
	ctx := context.Background()
	s := testStore(t)
	os := []MutationOutcome{
		{MutationID: "m1", Channel: "booking", Family: models.FamilyRates, Outcome: models.OutcomeSuperseded, Reason: "by v7"},
		{MutationID: "m2", Channel: "booking", Outcome: models.OutcomeRejected, Reason: "amount: required"},
	}
	var wg sync.WaitGroup
	counts := make([]map[models.Outcome]int, 4)
	errs := make([]error, 4)
	for i := range counts {
		// Separate stores: separate caches, as separate workers.
		w := New(s.pool)
		wg.Go(func() { counts[i], errs[i] = w.RecordOutcomes(ctx, "batch-1", os) })
	}
	wg.Wait()
	for i := range counts {
		if errs[i] != nil {
			t.Fatalf("writer %d: %v", i, errs[i])
		}
		if counts[i][models.OutcomeSuperseded] != 1 || counts[i][models.OutcomeRejected] != 1 {
			t.Errorf("writer %d counted %v, want 1 superseded and 1 rejected", i, counts[i])
		}
	}
	if rows := rowCount(t, s, "outcomes"); rows != 2 {
		t.Fatalf("%d outcome rows, want 2", rows)
	}
	got, err := s.Outcomes(ctx, "batch-1", "m2")
	if err != nil || len(got) != 1 || got[0].Family != "" || got[0].Reason != "amount: required" {
		t.Fatalf("outcomes of m2: %+v, %v", got, err)
	}
}

func TestTheFirstOutcomeOfAnUpdateStands(t *testing.T) {
	ctx := context.Background()
	s := testStore(t)
	r := requestOf(t, price("m", 1, "80", 0))
	if _, err := s.RecordOutcomes(ctx, "b", []MutationOutcome{{MutationID: "m", Channel: "booking",
		Family: models.FamilyRates, Outcome: models.OutcomeCancelled}}); err != nil {
		t.Fatal(err)
	}
	// A push that was already on its way when the batch was cancelled.
	committed, _, err := s.RecordAcknowledged(ctx, Ack{BatchID: "b", Request: r, ConfirmationID: "c"})
	if err != nil || committed != 0 {
		t.Fatalf("committed %d, %v; want 0: the update already had an outcome", committed, err)
	}
	got, _ := s.Outcomes(ctx, "b", "m")
	if len(got) != 1 || got[0].Outcome != models.OutcomeCancelled {
		t.Fatalf("outcomes: %+v", got)
	}
}

func TestBatchOutcomesAddUp(t *testing.T) {
	ctx := context.Background()
	s := testStore(t)
	var ms []models.Mutation
	for i := range 30 {
		ms = append(ms, price(fmt.Sprintf("m%02d", i), 1, "80", i))
	}
	if _, err := s.RecordDesired(ctx, ms); err != nil {
		t.Fatal(err)
	}
	co := models.Coalesce(ms[:20], nil)
	for _, r := range co.Requests {
		if _, _, err := s.RecordAcknowledged(ctx, Ack{BatchID: "b", Request: r, ConfirmationID: "c"}); err != nil {
			t.Fatal(err)
		}
	}
	parked := models.Coalesce(ms[20:25], nil).Requests[0]
	if _, _, err := s.ParkDeadLetter(ctx, DeadLetter{BatchID: "b", Reason: models.ReasonRejected, Status: 400, Request: parked}); err != nil {
		t.Fatal(err)
	}
	var rest []MutationOutcome
	for _, m := range ms[25:] {
		rest = append(rest, MutationOutcome{MutationID: m.ID, Channel: m.Channel, Family: models.FamilyRates, Outcome: models.OutcomeSuperseded})
	}
	rest = append(rest, MutationOutcome{MutationID: "bad", Channel: "expedia", Outcome: models.OutcomeRejected})
	if _, err := s.RecordOutcomes(ctx, "b", rest); err != nil {
		t.Fatal(err)
	}
	counts, err := s.BatchCounts(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	want := []models.ChannelCounts{
		{Channel: "booking", Total: 30, Committed: 20, Superseded: 5, DeadLettered: 5},
		{Channel: "expedia", Total: 1, Rejected: 1},
	}
	if fmt.Sprint(counts) != fmt.Sprint(want) {
		t.Fatalf("counts %+v\nwant   %+v", counts, want)
	}
}

func TestRecordOutcomesRefusesAnUnknownOutcome(t *testing.T) {
	s := testStore(t)
	_, err := s.RecordOutcomes(context.Background(), "b", []MutationOutcome{{MutationID: "m", Channel: "booking", Outcome: "lost"}})
	if err == nil {
		t.Fatal("an unknown outcome was recorded")
	}
}
