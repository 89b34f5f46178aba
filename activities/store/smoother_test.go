package store

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/paritysync/paritysync/models"
)

// smootherChange is a valid rate change of one cell at priority p.
func smootherChange(id string, p int) models.Mutation {
	a := decimal.New(12900, 0)
	return models.Mutation{ID: id, PropertyID: "HOTEL1", RoomTypeCode: "DLXKING", RatePlanCode: "BAR",
		Channel: "expedia", StayDate: night, Values: models.Values{Amount: &a, Currency: "EUR"}, Version: 1, Priority: p}
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

// TestSmootherStatementsUseIndexes runs the claim check's statements (stage, admit,
// count, take, close, drop, prune) against a schema in a production shape with
// 20,000 changes waiting or staged over four channels, and fails if the planner
// reads a large table whole for any of them.
func TestSmootherStatementsUseIndexes(t *testing.T) {
	if testing.Short() {
		t.Skip("loads about 270k rows")
	}
	ctx := context.Background()
	s, log := tracedStore(t)
	load(t, s.pool,
		`INSERT INTO channels (slug) VALUES ('expedia'), ('load_c'), ('load_d')`,
		`INSERT INTO smoother_changes (channel, submission, idx, priority, admitted, staged_at, body)
			SELECT c.id, 'sub-' || (i / 20), i % 20, 1 + i % 5, CASE WHEN i % 10 <> 0 THEN i END, now(), '{}'::bytea
			FROM channels c, generate_series(1, 5000) i WHERE c.slug <> 'load_a'`,
		`ANALYZE smoother_changes`,
	)

	log.on = true
	if err := s.StageChanges(ctx, "expedia", "explain", []models.Mutation{smootherChange("a", 3), smootherChange("b", 1)}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AdmitChanges(ctx, "expedia", "explain"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.WaitingChanges(ctx, "expedia"); err != nil {
		t.Fatal(err)
	}
	if err := s.StageChanges(ctx, "expedia", "refused", []models.Mutation{smootherChange("c", 3)}); err != nil {
		t.Fatal(err)
	}
	if err := s.DropStaged(ctx, "expedia", "refused"); err != nil {
		t.Fatal(err)
	}
	log.on = false
	// The take reads real changes: the loaded bodies are not JSON.
	if _, err := s.pool.Exec(ctx, `DELETE FROM smoother_changes c USING channels ch
		WHERE ch.id = c.channel AND ch.slug = 'expedia' AND c.submission <> 'explain'`); err != nil {
		t.Fatal(err)
	}
	log.on = true
	if _, err := s.TakeChanges(ctx, "expedia", "smoother-explain-1", 3, 500); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ClosePending(ctx, "smoother-explain-1", "explain"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.PruneStaged(ctx, time.Now().Add(-24*time.Hour)); err != nil {
		t.Fatal(err)
	}
	log.on = false

	large := map[string]bool{"smoother_changes": true, "outcomes": true, "batches": true}
	seen := map[string]bool{}
	for _, st := range log.stmts {
		if seen[st.sql] || !strings.Contains(st.sql, "smoother_changes") && !strings.Contains(st.sql, "outcomes") {
			continue
		}
		seen[st.sql] = true
		if scans := explainPlan(t, s.pool, st.sql, st.args, false).seqScans(large); len(scans) > 0 {
			t.Errorf("reads %v whole:\n%s", scans, st.sql)
		}
	}
	if len(seen) < 8 {
		t.Fatalf("checked %d statements; the claim check sends more", len(seen))
	}
	t.Logf("%d statements of the smoother's claim check read by index", len(seen))
}
