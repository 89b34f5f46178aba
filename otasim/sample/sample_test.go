package sample

import (
	"testing"
	"time"

	"github.com/paritysync/paritysync/models"
)

func TestSampleBatchHasItsInvalidRowsAndUrgentStops(t *testing.T) {
	now := time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC)
	v, err := models.NewValidator(models.DefaultChannels(), "", func() time.Time { return now })
	if err != nil {
		t.Fatal(err)
	}
	ms := Batch(1000, models.DateOf(now), 7, 1)
	if len(ms) != 1000 {
		t.Fatalf("got %d mutations, want 1000", len(ms))
	}
	invalid, urgent := 0, 0
	ids := map[string]bool{}
	for _, m := range ms {
		ids[m.ID] = true
		if len(v.Validate(m)) > 0 {
			invalid++
			continue
		}
		m.ApplyDefaults(func() string { return "c" })
		if m.Priority == models.PriorityUrgent {
			urgent++
		}
	}
	if invalid != 10 {
		t.Errorf("invalid rows: got %d, want 10 (1 %%)", invalid)
	}
	if urgent != 20 {
		t.Errorf("urgent stop-sells: got %d, want 20 (2 %%)", urgent)
	}
	if len(ids) != len(ms) {
		t.Errorf("ids are not unique")
	}
	co := models.Coalesce(ms, models.ChannelMap(models.DefaultChannels()))
	if len(co.Requests) >= len(ms)/10 {
		t.Errorf("runs of equal prices should coalesce: %d mutations into %d requests", len(ms), len(co.Requests))
	}
}
