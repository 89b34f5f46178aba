package activities

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/paritysync/paritysync/activities/store"
	"github.com/paritysync/paritysync/models"
)

// deadLetterRequest is a three-line availability request with two refs on its
// middle line.
func (e *activityEnv) deadLetterRequest(property string) models.ChannelRequest {
	r := models.ChannelRequest{Channel: testChannel, PropertyID: property, Family: models.FamilyAvailability, Priority: 2}
	d := e.today.AddDays(12)
	r.Lines = []models.ARILine{
		{RoomTypeCode: testRoom, RatePlanCode: testPlan, From: d, To: d, Values: models.Values{Inventory: ptr(1)}, Version: 3},
		{RoomTypeCode: testRoom, RatePlanCode: testPlan, From: d.AddDays(1), To: d.AddDays(2), Values: models.Values{Inventory: ptr(2)}, Version: 3},
		{RoomTypeCode: testRoom, RatePlanCode: testPlan, From: d.AddDays(3), To: d.AddDays(3), Values: models.Values{Inventory: ptr(3)}, Version: 3},
	}
	r.Refs = []models.MutationRef{
		{ID: "dl-0", Version: 3, Line: 0, StayDate: d},
		{ID: "dl-1", Version: 3, Line: 1, StayDate: d.AddDays(1)},
		{ID: "dl-2", Version: 3, Line: 1, StayDate: d.AddDays(2)},
		{ID: "dl-3", Version: 3, Line: 2, StayDate: d.AddDays(3)},
	}
	return r
}

func (e *activityEnv) deadLetters() []store.DeadLetter {
	e.t.Helper()
	ds, err := e.store.DeadLetters(context.Background(), store.DeadLetterFilter{Channel: testChannel})
	if err != nil {
		e.t.Fatal(err)
	}
	return ds
}

func TestRecordDeadLetterParksRequest(t *testing.T) {
	t.Parallel()
	e := newActivityEnv(t, envOptions{})
	req := e.deadLetterRequest(testProperty)
	key := e.saveChunk("b-dlq", req)
	res := e.deadLetter(models.DeadLetterInput{BatchID: "b-dlq", ChunkKey: key, Index: 0,
		Reason: models.ReasonRejected, Status: 400, Message: "lines[0].inventory: nope"})
	if res.Updates != 4 || res.EntryID == "" {
		t.Errorf("result %+v, want 4 updates and an entry id", res)
	}
	ds := e.deadLetters()
	if len(ds) != 1 {
		t.Fatalf("%d dead letters, want 1", len(ds))
	}
	d := ds[0]
	if fmt.Sprint(d.ID) != res.EntryID || d.BatchID != "b-dlq" || d.Reason != models.ReasonRejected || d.Status != 400 ||
		d.Message != "lines[0].inventory: nope" || d.PropertyID != testProperty ||
		!slices.Equal(d.MutationIDs, []string{"dl-0", "dl-1", "dl-2", "dl-3"}) || len(d.StayDates) != 4 {
		t.Errorf("dead letter %+v", d)
	}
	if d.Request.IdempotencyKey() != req.IdempotencyKey() || !slices.Equal(d.Request.Refs, req.Refs) {
		t.Errorf("parked request %+v, want %+v", d.Request, req)
	}
}

func TestRecordDeadLetterOnlyListedLines(t *testing.T) {
	t.Parallel()
	e := newActivityEnv(t, envOptions{})
	req := e.deadLetterRequest(testProperty)
	key := e.saveChunk("b-lines", req)
	res := e.deadLetter(models.DeadLetterInput{BatchID: "b-lines", ChunkKey: key, Index: 0, Lines: []int{1, 2},
		Reason: models.ReasonLineFailed, Status: 207, Message: "line_rejected"})
	if res.Updates != 3 {
		t.Errorf("updates %d, want 3 (two refs on line 1, one on line 2)", res.Updates)
	}
	ds := e.deadLetters()
	if len(ds) != 1 {
		t.Fatalf("%d dead letters, want 1", len(ds))
	}
	got := ds[0].Request
	if len(got.Lines) != 2 || got.Lines[0].From != req.Lines[1].From || got.Lines[1].From != req.Lines[2].From {
		t.Fatalf("parked lines %+v, want lines 1 and 2", got.Lines)
	}
	var ids []string
	for _, ref := range got.Refs {
		ids = append(ids, ref.ID)
		line := got.Lines[ref.Line]
		if ref.StayDate.Before(line.From) || ref.StayDate.After(line.To) {
			t.Errorf("ref %s (night %s) points at line %d over %s..%s", ref.ID, ref.StayDate, ref.Line, line.From, line.To)
		}
	}
	if !slices.Equal(ids, []string{"dl-1", "dl-2", "dl-3"}) {
		t.Errorf("parked refs %v, want dl-1 dl-2 dl-3", ids)
	}
}

func TestRecordDeadLetterRetryParksOnce(t *testing.T) {
	t.Parallel()
	e := newActivityEnv(t, envOptions{})
	key := e.saveChunk("b-retry", e.deadLetterRequest(testProperty))
	in := models.DeadLetterInput{BatchID: "b-retry", ChunkKey: key, Index: 0, Lines: []int{0},
		Reason: models.ReasonLineFailed, Status: 207}
	first := e.deadLetter(in)
	second := e.deadLetter(in)
	if first.EntryID == "" || second.EntryID != first.EntryID {
		t.Errorf("entry ids %q then %q, want the same entry", first.EntryID, second.EntryID)
	}
	if second.Updates != first.Updates {
		t.Errorf("retry reports %d updates, first call %d", second.Updates, first.Updates)
	}
	if n := len(e.deadLetters()); n != 1 {
		t.Errorf("%d dead letters after a retried call, want 1", n)
	}
}

func TestRecordDeadLetterWholeChunk(t *testing.T) {
	t.Parallel()
	e := newActivityEnv(t, envOptions{})
	props := []string{"prop_00000001", "prop_00000002", "prop_00000003"}
	var reqs []models.ChannelRequest
	for _, p := range props {
		reqs = append(reqs, e.deadLetterRequest(p))
	}
	key := e.saveChunk("b-whole", reqs...)
	res := e.deadLetter(models.DeadLetterInput{BatchID: "b-whole", ChunkKey: key, Index: models.WholeChunk,
		Reason: models.ReasonChildFailed})
	if res.Updates != 12 {
		t.Errorf("updates %d, want 12", res.Updates)
	}
	ds := e.deadLetters()
	var got []string
	for _, d := range ds {
		got = append(got, d.PropertyID)
		if d.Reason != models.ReasonChildFailed || len(d.Request.Refs) != 4 {
			t.Errorf("dead letter %+v", d)
		}
	}
	if !slices.Equal(got, props) {
		t.Errorf("parked properties %v, want %v", got, props)
	}
}
