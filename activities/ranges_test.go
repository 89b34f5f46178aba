package activities

import (
	"context"
	"fmt"
	"testing"

	"github.com/paritysync/paritysync/activities/store"
	"github.com/paritysync/paritysync/models"
)

// TestPrepareBatchExpandsARangeWithOneUpdatePerFamily prepares a ten-night range
// with a newer single-night mutation on one of its nights: the range's other nights
// go out as two lines around the newer night, the batch counts two updates, and
// once its nights are acknowledged the range has one committed outcome whose
// reason names the superseded night.
func TestPrepareBatchExpandsARangeWithOneUpdatePerFamily(t *testing.T) {
	t.Parallel()
	e := newActivityEnv(t, envOptions{chunkSize: 10})
	from, to := e.today.AddDays(10), e.today.AddDays(19)
	season := e.mutation("season", 0, 5, withRate("129.00"))
	season.StayDate, season.From, season.To = models.Date{}, from, to
	newer := e.mutation("newer", 14, 6, withRate("150.00"))
	plan := e.prepare(models.BatchSyncInput{BatchID: "b-range", Mutations: []models.Mutation{season, newer}})

	if len(plan.Decided) != 1 || plan.Decided[0].Total != 2 || plan.Decided[0].Superseded != 0 {
		t.Fatalf("decided %+v, want 2 updates and no outcome yet", plan.Decided)
	}
	var lines []string
	ctx := context.Background()
	for _, c := range plan.Chunks {
		for _, r := range e.chunkRequests(c) {
			for _, l := range r.Lines {
				lines = append(lines, fmt.Sprintf("%s..%s v%d", l.From, l.To, l.Version))
			}
			if _, _, err := e.store.RecordAcknowledged(ctx, store.Ack{BatchID: "b-range", Request: r, ConfirmationID: "c"}); err != nil {
				t.Fatal(err)
			}
		}
	}
	want := []string{
		fmt.Sprintf("%s..%s v5", from, e.today.AddDays(13)),
		fmt.Sprintf("%s..%s v6", e.today.AddDays(14), e.today.AddDays(14)),
		fmt.Sprintf("%s..%s v5", e.today.AddDays(15), to),
	}
	if fmt.Sprint(lines) != fmt.Sprint(want) {
		t.Fatalf("lines %v, want %v", lines, want)
	}
	got, err := e.store.Outcomes(ctx, "b-range", "season")
	wantReason := fmt.Sprintf("1 of 10 nights superseded: %s (version 5 superseded by 6)", e.today.AddDays(14))
	if err != nil || len(got) != 1 || got[0].Outcome != models.OutcomeCommitted || got[0].Reason != wantReason {
		t.Fatalf("outcomes of the range %+v, %v; want one committed, reason %q", got, err, wantReason)
	}
	counts, _ := e.store.BatchCounts(ctx, "b-range")
	if len(counts) != 1 || counts[0].Total != 2 || counts[0].Committed != 2 {
		t.Fatalf("counts %+v, want 2 updates committed", counts)
	}
}
