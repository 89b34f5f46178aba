package store

import (
	"context"
	"fmt"
	"testing"

	"github.com/paritysync/paritysync/models"
)

// TestBatchProgressIsDoneOfThePlannedTotal: before PrepareBatch records the
// totals a batch is not planned and never done; after, each channel's total is what
// was planned (never fewer than its outcomes) and the batch is done once every
// planned update has its outcome. A retried record replaces the first.
func TestBatchProgressIsDoneOfThePlannedTotal(t *testing.T) {
	s := testStore(t)
	ctx := context.Background()
	p, err := s.BatchProgress(ctx, "p")
	if err != nil {
		t.Fatal(err)
	}
	if p.Planned || p.Done() || len(p.Channels) != 0 {
		t.Fatalf("an unknown batch has no progress: %+v", p)
	}
	// A refused row recorded before the plan (intake records them).
	if _, err := s.RecordOutcomes(ctx, "p", []MutationOutcome{{MutationID: "bad", Channel: "expedia", Outcome: models.OutcomeRejected}}); err != nil {
		t.Fatal(err)
	}
	if p, err = s.BatchProgress(ctx, "p"); err != nil {
		t.Fatal(err)
	}
	if p.Planned || p.Done() {
		t.Fatalf("not planned yet, so not done: %+v", p)
	}
	for range 2 { // a retried PrepareBatch records the same totals again
		if err := s.RecordExpected(ctx, "p", map[string]int{"booking": 3, "expedia": 0}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.RecordOutcomes(ctx, "p", []MutationOutcome{
		{MutationID: "m1", Channel: "booking", Family: models.FamilyRates, Outcome: models.OutcomeCommitted},
		{MutationID: "m2", Channel: "booking", Family: models.FamilyRates, Outcome: models.OutcomeSuperseded}}); err != nil {
		t.Fatal(err)
	}
	if p, err = s.BatchProgress(ctx, "p"); err != nil {
		t.Fatal(err)
	}
	want := []models.ChannelCounts{
		{Channel: "booking", Total: 3, Committed: 1, Superseded: 1},
		{Channel: "expedia", Total: 1, Rejected: 1},
	}
	if !p.Planned || p.Done() || fmt.Sprint(p.Channels) != fmt.Sprint(want) {
		t.Fatalf("progress %+v\nwant planned, not done, %+v", p, want)
	}
	if _, err := s.RecordOutcomes(ctx, "p", []MutationOutcome{
		{MutationID: "m3", Channel: "booking", Family: models.FamilyRates, Outcome: models.OutcomeDeadLettered}}); err != nil {
		t.Fatal(err)
	}
	if p, err = s.BatchProgress(ctx, "p"); err != nil {
		t.Fatal(err)
	}
	if !p.Done() {
		t.Fatalf("every planned update has its outcome: %+v", p)
	}

	// A batch planned with no update at all is planned and done.
	if err := s.RecordExpected(ctx, "empty", map[string]int{}); err != nil {
		t.Fatal(err)
	}
	if p, err = s.BatchProgress(ctx, "empty"); err != nil || !p.Planned || !p.Done() {
		t.Fatalf("empty batch: %+v, %v", p, err)
	}
}
