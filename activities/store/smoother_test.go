package store

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/paritysync/paritysync/models"
)

// smootherChange is a valid rate change of one cell at priority p.
func smootherChange(id string, p int) models.Mutation {
	a := decimal.New(12900, 0)
	return models.Mutation{ID: id, PropertyID: "HOTEL1", RoomTypeCode: "DLXKING", RatePlanCode: "BAR",
		Channel: "expedia", StayDate: night, Amount: &a, Currency: "EUR", Version: 1, Priority: p}
}

func TestSmootherClaimCheckTakesAdmittedChangesInOrderByPriority(t *testing.T) {
	ctx := context.Background()
	s := testStore(t)
	stage := func(sub string, ms ...models.Mutation) {
		t.Helper()
		if err := s.StageChanges(ctx, "expedia", sub, ms); err != nil {
			t.Fatal(err)
		}
	}
	stage("s1", smootherChange("a", 3), smootherChange("b", 5), smootherChange("c", 3))
	stage("s2", smootherChange("d", 1), smootherChange("e", 3))
	stage("refused", smootherChange("x", 1))
	for _, sub := range []string{"s1", "s2"} {
		c, err := s.AdmitChanges(ctx, "expedia", sub)
		if err != nil {
			t.Fatal(err)
		}
		again, err := s.AdmitChanges(ctx, "expedia", sub)
		if err != nil || again != c {
			t.Fatalf("a retried admission answers %v, %v; the first %v", again, err, c)
		}
	}
	if err := s.DropStaged(ctx, "expedia", "refused"); err != nil {
		t.Fatal(err)
	}

	waiting, err := s.WaitingChanges(ctx, "expedia")
	if want := (models.PriorityCounts{0, 1, 0, 3, 0, 1}); err != nil || waiting != want {
		t.Fatalf("waiting %v, %v; want %v (the refused submission not among them)", waiting, err, want)
	}

	// Priority 3 at most, two of them: the oldest two of a, c, d, e.
	got, err := s.TakeChanges(ctx, "expedia", "smoother-expedia-1", 3, 2)
	if err != nil {
		t.Fatal(err)
	}
	if want := (models.PriorityCounts{0, 0, 0, 2}); got.Changes != want {
		t.Fatalf("took %v, want %v", got.Changes, want)
	}
	ms, err := s.LoadBatch(ctx, got.PayloadKey)
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 2 || ms[0].ID != "a" || ms[1].ID != "c" {
		t.Fatalf("payload %v, want a and c in admission order", ids(ms))
	}
	retry, err := s.TakeChanges(ctx, "expedia", "smoother-expedia-1", 3, 2)
	if err != nil || retry != got {
		t.Fatalf("a retried take answers %+v, %v; the first %+v", retry, err, got)
	}
	rest, err := s.TakeChanges(ctx, "expedia", "smoother-expedia-2", 5, 10)
	if err != nil {
		t.Fatal(err)
	}
	if want := (models.PriorityCounts{0, 1, 0, 1, 0, 1}); rest.Changes != want {
		t.Fatalf("took %v, want %v: the refused submission is gone", rest.Changes, want)
	}
	ms, _ = s.LoadBatch(ctx, rest.PayloadKey)
	if fmt.Sprint(ids(ms)) != "[b d e]" {
		t.Fatalf("payload %v, want [b d e]", ids(ms))
	}
	none, err := s.TakeChanges(ctx, "expedia", "smoother-expedia-3", 5, 10)
	if err != nil || none.Changes.Total() != 0 || none.PayloadKey != "" {
		t.Fatalf("an empty claim check answers %+v, %v", none, err)
	}
}

func TestSmootherPruneStagedKeepsAdmittedChanges(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	s := testStore(t, WithClock(func() time.Time { return now }))
	if err := s.StageChanges(ctx, "expedia", "lost", []models.Mutation{smootherChange("a", 3)}); err != nil {
		t.Fatal(err)
	}
	if err := s.StageChanges(ctx, "expedia", "kept", []models.Mutation{smootherChange("b", 3)}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AdmitChanges(ctx, "expedia", "kept"); err != nil {
		t.Fatal(err)
	}
	n, err := s.PruneStaged(ctx, now.Add(time.Minute))
	if err != nil || n != 1 {
		t.Fatalf("pruned %d, %v; want the one never admitted", n, err)
	}
	got, err := s.TakeChanges(ctx, "expedia", "smoother-expedia-1", 5, 10)
	if err != nil || got.Changes.Total() != 1 {
		t.Fatalf("took %+v, %v; want the admitted change", got, err)
	}
}

func TestClosePendingGivesEveryUpdateOfAFailedBatchOneOutcome(t *testing.T) {
	ctx := context.Background()
	s := testStore(t)
	ms := []models.Mutation{smootherChange("a", 3), smootherChange("b", 3), smootherChange("c", 3)}
	inv := 7
	ms[2].Inventory = &inv // rates and availability
	if _, err := s.SaveBatch(ctx, "smoother-expedia-1", ms); err != nil {
		t.Fatal(err)
	}
	// What the batch recorded before it died: a committed and b rejected whole.
	if _, err := s.RecordOutcomes(ctx, "smoother-expedia-1", []MutationOutcome{
		{MutationID: "a", Channel: "expedia", Family: models.FamilyRates, Outcome: models.OutcomeCommitted},
		{MutationID: "b", Channel: "expedia", Outcome: models.OutcomeRejected, Reason: "amount: bad"},
	}); err != nil {
		t.Fatal(err)
	}
	n, err := s.ClosePending(ctx, "smoother-expedia-1", "batch terminated")
	if err != nil || n != 2 {
		t.Fatalf("closed %d, %v; want c's two families", n, err)
	}
	again, err := s.ClosePending(ctx, "smoother-expedia-1", "batch terminated")
	if err != nil || again != n {
		t.Fatalf("a retried close answers %d, %v", again, err)
	}
	for _, id := range []string{"a", "b", "c"} {
		os, err := s.Outcomes(ctx, "smoother-expedia-1", id)
		if err != nil {
			t.Fatal(err)
		}
		want := 1
		if id == "c" {
			want = 2
		}
		if len(os) != want {
			t.Errorf("%s has %d outcomes, want %d: %+v", id, len(os), want, os)
		}
	}
}

func ids(ms []models.Mutation) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.ID
	}
	return out
}
