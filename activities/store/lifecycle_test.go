package store

import (
	"context"
	"testing"

	"github.com/paritysync/paritysync/models"
)

func TestCancelPendingKeepsRecordedOutcomes(t *testing.T) {
	s := testStore(t)
	ctx := context.Background()
	two := 2
	line := func(v int64) models.ARILine {
		return models.ARILine{RoomTypeCode: "DBL", RatePlanCode: "BAR", From: night, To: night.AddDays(1), Values: models.Values{Inventory: &two}, Version: v}
	}
	r := models.ChannelRequest{Channel: "ota", PropertyID: "p1", Family: models.FamilyAvailability, Priority: 3,
		Lines: []models.ARILine{line(1)},
		Refs: []models.MutationRef{{ID: "m1", Version: 1, Line: 0, StayDate: night},
			{ID: "m2", Version: 1, Line: 0, StayDate: night.AddDays(1)}}}
	if _, err := s.SaveChunk(ctx, "b1", models.Chunk{Channel: "ota", Priority: 3}, []models.ChannelRequest{r}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.RecordOutcomes(ctx, "b1", []MutationOutcome{{MutationID: "m1", Channel: "ota",
		Family: models.FamilyAvailability, Outcome: models.OutcomeCommitted}}); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		n, err := s.CancelPending(ctx, "b1", "cancelled by operator")
		if err != nil || n != 1 {
			t.Fatalf("cancelled %d, %v; want 1 (m1 was committed)", n, err)
		}
	}
	var got []string
	if err := s.BatchOutcomes(ctx, "b1", "", func(o MutationOutcome) error {
		got = append(got, o.MutationID+":"+string(o.Outcome))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0] != "m1:committed" || got[1] != "m2:cancelled" {
		t.Errorf("outcomes %v, want m1 committed and m2 cancelled", got)
	}
}
