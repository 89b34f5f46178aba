package store

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/paritysync/paritysync/models"
)

// TestPostCallbackIsQueuedOnceWhenEveryChangeHasItsOutcomes registers a post of
// two changes, one spanning two families: its callback is queued only once both
// families of the one and the other (rejected whole) have outcomes in a smoother's
// batch, exactly once however often the sweep runs; outcomes in a batch of another
// prefix do not count, and a change that already had an outcome counts at once.
func TestPostCallbackIsQueuedOnceWhenEveryChangeHasItsOutcomes(t *testing.T) {
	ctx := context.Background()
	s := testStore(t)
	post := Post{EventID: "chg_1", Tenant: "acme", URL: "https://pms.example/hook", Answer: json.RawMessage(`{"accepted":2}`),
		Members: []PostMember{{Channel: "expedia", MutationID: "acme:a", Families: 2}, {Channel: "agoda", MutationID: "acme:b", Families: 1}}}
	if err := s.RegisterPost(ctx, post); err != nil {
		t.Fatal(err)
	}
	sweep := func(want int) {
		t.Helper()
		n, err := s.QueuePostCallbacks(ctx, "smoother-", 10)
		if err != nil || n != want {
			t.Fatalf("queued %d (%v), want %d", n, err, want)
		}
	}
	record := func(batch string, os ...MutationOutcome) {
		t.Helper()
		if _, err := s.RecordOutcomes(ctx, batch, os); err != nil {
			t.Fatal(err)
		}
	}
	sweep(0)
	record("other-1", MutationOutcome{MutationID: "acme:b", Channel: "agoda", Outcome: models.OutcomeRejected, Reason: "x"})
	record("smoother-1", MutationOutcome{MutationID: "acme:a", Channel: "expedia", Family: models.FamilyRates, Outcome: models.OutcomeCommitted})
	sweep(0) // a's availability and b (in a smoother's batch) are still to come
	record("smoother-1", MutationOutcome{MutationID: "acme:a", Channel: "expedia", Family: models.FamilyAvailability, Outcome: models.OutcomeCommitted})
	sweep(0)
	record("smoother-2", MutationOutcome{MutationID: "acme:b", Channel: "agoda", Outcome: models.OutcomeRejected, Reason: "y"})
	sweep(1)
	sweep(0)
	var body string
	var n int
	if err := s.pool.QueryRow(ctx, `SELECT body, count(*) OVER () FROM callbacks WHERE event_id = 'chg_1'`).Scan(&body, &n); err != nil || n != 1 {
		t.Fatalf("callbacks of the post: %d (%v)", n, err)
	}
	var ev PostCompleted
	if err := json.Unmarshal([]byte(body), &ev); err != nil {
		t.Fatal(err)
	}
	if ev.Type != EventChangesCompleted || string(ev.Answer) != `{"accepted": 2}` && string(ev.Answer) != `{"accepted":2}` || len(ev.Outcomes) != 3 {
		t.Fatalf("event %+v", ev)
	}
	for _, o := range ev.Outcomes {
		if o.MutationID != "a" && o.MutationID != "b" {
			t.Errorf("outcome under %q, want the PMS's id", o.MutationID)
		}
	}
	// Sent again: a change with an outcome already counts.
	again := Post{EventID: "chg_2", Tenant: "acme", URL: post.URL, Answer: json.RawMessage(`{}`),
		Members: []PostMember{{Channel: "agoda", MutationID: "acme:b", Families: 1}}}
	if err := s.RegisterPost(ctx, again); err != nil {
		t.Fatal(err)
	}
	sweep(1)

	// Pruned with the outcomes' retention: the posts, their members and callbacks.
	if n, err := s.PrunePosts(ctx, time.Now().Add(time.Hour)); err != nil || n != 2 {
		t.Fatalf("pruned %d posts (%v), want 2", n, err)
	}
	var left int
	if err := s.pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM change_post_members) + (SELECT count(*) FROM callbacks)`).Scan(&left); err != nil || left != 2 {
		t.Fatalf("%d members and callbacks left (%v), want the 2 undelivered callbacks", left, err)
	}
}
