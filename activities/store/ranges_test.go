package store

import (
	"context"
	"strings"
	"testing"

	"github.com/paritysync/paritysync/models"
)

// rangeNights is a three-night range "r" as PrepareBatch expands it.
func rangeNights() []models.Mutation {
	ms := []models.Mutation{price("r", 2, "129", 0), price("r", 2, "129", 1), price("r", 2, "129", 2)}
	for i := range ms {
		ms[i].RangeNights = 3
	}
	return ms
}

func TestRangeOutcomeIsRecordedOnceEveryNightEnded(t *testing.T) {
	ctx := context.Background()
	s := testStore(t)
	if err := s.RecordRanges(ctx, "b", []RangeMutation{{MutationID: "r", Nights: 3, Clipped: "1 nights before today clipped (2026-12-23..2026-12-23)"}}); err != nil {
		t.Fatal(err)
	}
	ns := rangeNights()
	// The first two nights are acknowledged: the range has no outcome yet.
	committed, _, err := s.RecordAcknowledged(ctx, Ack{BatchID: "b", Request: requestOf(t, ns[0], ns[1]), ConfirmationID: "c1"})
	if err != nil || committed != 0 {
		t.Fatalf("committed %d, %v; want 0 while a night is on its way", committed, err)
	}
	if got, _ := s.Outcomes(ctx, "b", "r"); len(got) != 0 {
		t.Fatalf("outcome before every night ended: %+v", got)
	}
	// The last night: one committed outcome, counted once.
	committed, _, err = s.RecordAcknowledged(ctx, Ack{BatchID: "b", Request: requestOf(t, ns[2]), ConfirmationID: "c2"})
	if err != nil || committed != 1 {
		t.Fatalf("committed %d, %v; want 1", committed, err)
	}
	got, _ := s.Outcomes(ctx, "b", "r")
	if len(got) != 1 || got[0].Outcome != models.OutcomeCommitted || got[0].Family != models.FamilyRates ||
		got[0].Reason != "1 nights before today clipped (2026-12-23..2026-12-23)" {
		t.Fatalf("outcomes %+v, want one committed with the clipped nights", got)
	}
	counts, err := s.BatchCounts(ctx, "b")
	if err != nil || len(counts) != 1 || counts[0].Total != 1 || counts[0].Committed != 1 {
		t.Fatalf("counts %+v, %v; want one update, committed", counts, err)
	}
	// A retry of the last acknowledgement records nothing more.
	if _, _, err := s.RecordAcknowledged(ctx, Ack{BatchID: "b", Request: requestOf(t, ns[2]), ConfirmationID: "c2"}); err != nil {
		t.Fatal(err)
	}
	if counts, _ := s.BatchCounts(ctx, "b"); counts[0].Total != 1 {
		t.Fatalf("counts after a retry %+v", counts)
	}
}

func TestRangeOutcomeIsTheWorstOfItsNights(t *testing.T) {
	ctx := context.Background()
	s := testStore(t)
	ns := rangeNights()
	if _, _, err := s.RecordAcknowledged(ctx, Ack{BatchID: "b", Request: requestOf(t, ns[0]), ConfirmationID: "c1"}); err != nil {
		t.Fatal(err)
	}
	// Superseded at PrepareBatch and dead-lettered after the push: the worst wins.
	if _, err := s.RecordOutcomes(ctx, "b", []MutationOutcome{{MutationID: "r", Channel: "booking", Family: models.FamilyRates,
		Outcome: models.OutcomeSuperseded, Reason: "version 2 superseded by 3", Night: ns[1].StayDate, Nights: 3}}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.ParkDeadLetter(ctx, DeadLetter{BatchID: "b", Request: requestOf(t, ns[2]), Reason: "400: bad rate"}); err != nil {
		t.Fatal(err)
	}
	got, _ := s.Outcomes(ctx, "b", "r")
	if len(got) != 1 || got[0].Outcome != models.OutcomeDeadLettered {
		t.Fatalf("outcomes %+v, want one dead-lettered", got)
	}
	for _, want := range []string{"1 of 3 nights dead-lettered: 2026-12-26 (400: bad rate)",
		"1 of 3 nights superseded: 2026-12-25 (version 2 superseded by 3)"} {
		if !strings.Contains(got[0].Reason, want) {
			t.Errorf("reason %q lacks %q", got[0].Reason, want)
		}
	}
}

func TestFoldOutcomeOrder(t *testing.T) {
	n := func(day int, o models.Outcome) rangeNight { return rangeNight{night: night.AddDays(day), outcome: o} }
	for _, c := range []struct {
		nights []rangeNight
		want   models.Outcome
	}{
		{[]rangeNight{n(0, models.OutcomeCommitted), n(1, models.OutcomeCommitted)}, models.OutcomeCommitted},
		{[]rangeNight{n(0, models.OutcomeSuperseded), n(1, models.OutcomeCommitted)}, models.OutcomeCommitted},
		{[]rangeNight{n(0, models.OutcomeSuperseded), n(1, models.OutcomeSuperseded)}, models.OutcomeSuperseded},
		{[]rangeNight{n(0, models.OutcomeCancelled), n(1, models.OutcomeCommitted)}, models.OutcomeCancelled},
		{[]rangeNight{n(0, models.OutcomeCancelled), n(1, models.OutcomeDeadLettered)}, models.OutcomeDeadLettered},
	} {
		if got, _ := foldOutcome(c.nights, ""); got != c.want {
			t.Errorf("fold %+v = %s, want %s", c.nights, got, c.want)
		}
	}
	if _, reason := foldOutcome([]rangeNight{n(0, models.OutcomeCommitted)}, ""); reason != "" {
		t.Errorf("a committed range without clipping has reason %q", reason)
	}
}

func TestDeadLetteredRangeNightsReplayEachUnderItsNight(t *testing.T) {
	ns := rangeNights()
	d := DeadLetter{Request: requestOf(t, ns[0], ns[1])}
	ms := d.Mutations()
	if len(ms) != 2 || ms[0].ID != "r~2026-12-24" || ms[1].ID != "r~2026-12-25" || ms[0].IsRange() {
		t.Fatalf("replayed %+v", ms)
	}
}
