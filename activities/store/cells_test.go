package store

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/paritysync/paritysync/models"
)

// cellStates reads every state of the test channel around night.
func cellStates(t *testing.T, s *Store) []CellState {
	t.Helper()
	var out []CellState
	if err := s.CellStates(context.Background(), "booking", night.AddDays(-10), night.AddDays(40), func(c CellState) error {
		out = append(out, c)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestRecordDesiredNewestVersionWinsBetweenConcurrentWriters(t *testing.T) {
	ctx := context.Background()
	s := testStore(t)
	for round := range 20 {
		day := round // a fresh cell per round
		older, newer := price("old", 5, "80.00", day), price("new", 7, "95.00", day)
		var wg sync.WaitGroup
		var staleOld, staleNew []models.Superseded
		var errOld, errNew error
		// Two writers, as two workers preparing two batches; which one the database
		// serves first differs from round to round.
		wg.Go(func() { staleOld, errOld = s.RecordDesired(ctx, []models.Mutation{older}) })
		wg.Go(func() { staleNew, errNew = s.RecordDesired(ctx, []models.Mutation{newer}) })
		wg.Wait()
		if errOld != nil || errNew != nil {
			t.Fatalf("round %d: %v, %v", round, errOld, errNew)
		}
		if len(staleNew) != 0 {
			t.Fatalf("round %d: the newer version was reported stale: %+v", round, staleNew)
		}
		if len(staleOld) == 1 && staleOld[0].By != 7 {
			t.Fatalf("round %d: stale by %d, want 7", round, staleOld[0].By)
		}
	}
	states := cellStates(t, s)
	if len(states) != 20 {
		t.Fatalf("got %d cells, want 20", len(states))
	}
	for _, c := range states {
		if c.Desired.Version != 7 || c.Desired.Amount.String() != "95" {
			t.Errorf("%s: desired v%d %s, want v7 95.00", c.Cell.StayDate, c.Desired.Version, c.Desired.Amount)
		}
	}
}

func TestRecordDesiredReportsOnlyPartsOlderThanTheRecordedVersion(t *testing.T) {
	ctx := context.Background()
	s := testStore(t)
	if _, err := s.RecordDesired(ctx, []models.Mutation{price("a", 10, "100", 0)}); err != nil {
		t.Fatal(err)
	}
	inv := 4
	older := price("b", 9, "90", 0)
	older.Inventory = &inv // availability is a cell of its own: not stale
	stale, err := s.RecordDesired(ctx, []models.Mutation{
		older,
		price("c", 10, "100", 0), // same version again: a retried PrepareBatch
		price("d", 3, "70", 1),   // loses to e in the same batch
		price("e", 4, "75", 1),
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []models.Superseded{
		{ID: "b", Channel: "booking", Family: models.FamilyRates, Version: 9, By: 10},
		{ID: "d", Channel: "booking", Family: models.FamilyRates, Version: 3, By: 4},
	}
	if fmt.Sprint(stale) != fmt.Sprint(want) {
		t.Fatalf("stale = %+v\nwant    %+v", stale, want)
	}
	states := cellStates(t, s)
	if len(states) != 3 {
		t.Fatalf("got %d cell states, want 3 (rates ×2 nights, availability)", len(states))
	}
	for _, c := range states {
		switch {
		case c.Family == models.FamilyAvailability && (c.Desired.Version != 9 || *c.Desired.Inventory != 4 || c.Desired.Amount != nil):
			t.Errorf("availability: %+v", c.Desired)
		case c.Family == models.FamilyRates && c.Cell.StayDate == night && c.Desired.Amount.String() != "100":
			t.Errorf("rates night 0: %s", c.Desired.Amount)
		case c.Family == models.FamilyRates && c.Cell.StayDate != night && c.Desired.Version != 4:
			t.Errorf("rates night 1: v%d", c.Desired.Version)
		}
	}
}

func TestRecordAcknowledgedCommitsOnceAndSupersedesOlderAcks(t *testing.T) {
	ctx := context.Background()
	s := testStore(t)
	newer := requestOf(t, price("m2", 2, "95.00", 0), price("n2", 2, "95.00", 1))
	committed, superseded, err := s.RecordAcknowledged(ctx, Ack{BatchID: "b2", Request: newer, ConfirmationID: "conf-2"})
	if err != nil || committed != 2 || superseded != 0 {
		t.Fatalf("first ack: %d committed, %d superseded, %v; want 2, 0", committed, superseded, err)
	}
	// A retried activity records nothing new and answers the same.
	committed, superseded, err = s.RecordAcknowledged(ctx, Ack{BatchID: "b2", Request: newer, ConfirmationID: "conf-2"})
	if err != nil || committed != 2 || superseded != 0 {
		t.Fatalf("retried ack: %d committed, %d superseded, %v; want 2, 0", committed, superseded, err)
	}
	// An older version confirmed late does not overwrite the newer acknowledgement.
	older := requestOf(t, price("m1", 1, "80.00", 0))
	committed, superseded, err = s.RecordAcknowledged(ctx, Ack{BatchID: "b1", Request: older, ConfirmationID: "conf-1"})
	if err != nil || committed != 0 || superseded != 1 {
		t.Fatalf("older ack: %d committed, %d superseded, %v; want 0, 1", committed, superseded, err)
	}
	for _, c := range cellStates(t, s) {
		if c.Acked.Version != 2 || c.Acked.Amount.String() != "95" || c.ConfirmationID != "conf-2" || c.SentVersion != 2 {
			t.Errorf("%s: acked v%d %s conf %q sent v%d; want v2 95 conf-2 sent v2", c.Cell.StayDate,
				c.Acked.Version, c.Acked.Amount, c.ConfirmationID, c.SentVersion)
		}
		if c.Desired.Version != 0 || !c.ConfirmedAt.After(c.ConfirmedAt.AddDate(-1, 0, 0)) {
			t.Errorf("%s: desired v%d confirmed at %s", c.Cell.StayDate, c.Desired.Version, c.ConfirmedAt)
		}
	}
	if rows := rowCount(t, s, "outcomes"); rows != 3 {
		t.Fatalf("%d outcome rows, want 3: one per mutation however often recorded", rows)
	}
}

func TestRecordAcknowledgedSkipsFailedLines(t *testing.T) {
	ctx := context.Background()
	s := testStore(t)
	ms := []models.Mutation{price("a", 1, "80", 0), price("b", 1, "90", 1)}
	r := requestOf(t, ms...)
	if len(r.Lines) != 2 {
		t.Fatalf("want 2 lines, got %d", len(r.Lines))
	}
	committed, _, err := s.RecordAcknowledged(ctx, Ack{BatchID: "b", Request: r, ConfirmationID: "c", FailedLines: []int{1}})
	if err != nil || committed != 1 {
		t.Fatalf("committed %d, %v; want 1", committed, err)
	}
	if out, _ := s.Outcomes(ctx, "b", "b"); len(out) != 0 {
		t.Errorf("a failed line got an outcome: %+v", out)
	}
	if out, _ := s.Outcomes(ctx, "b", "a"); len(out) != 1 || out[0].Outcome != models.OutcomeCommitted {
		t.Errorf("outcomes of a: %+v", out)
	}
}

func TestRecordSentKeepsTheNewestVersionPerNight(t *testing.T) {
	ctx := context.Background()
	s := testStore(t)
	for _, r := range []models.ChannelRequest{
		requestOf(t, price("a", 3, "80", 0), price("b", 3, "80", 1)),
		requestOf(t, price("c", 2, "70", 0)), // older: must not lower the gate
		requestOf(t, price("d", 4, "90", 1)),
	} {
		if err := s.RecordSent(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	var got []string
	if err := s.SentVersions(ctx, "booking", night, func(v SentVersion) error {
		got = append(got, fmt.Sprintf("%s/%s/%s/%s v%d", v.Cell.PropertyID, v.Family, v.Cell.RoomTypeCode, v.Cell.StayDate, v.Version))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	want := []string{"prop_0000abcd/rates/DBL/2026-12-24 v3", "prop_0000abcd/rates/DBL/2026-12-25 v4"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("sent versions %v, want %v", got, want)
	}
}

// TestRecordSendingHoldsOneConnection: a worker's first push reads its request in a
// transaction and meets room rates it has not numbered yet. Numbering them takes a
// connection of its own; inside the transaction that would wait on the pool, and
// with every connection held by such a transaction the pool stalls until the
// deadline. On a pool of one connection, it completes.
func TestRecordSendingHoldsOneConnection(t *testing.T) {
	ctx := context.Background()
	setup := testStore(t)
	today := models.DateOf(time.Now())
	key, req := chunkAhead(t, setup, "pool")

	cfg := setup.pool.Config() // the same schema, on a pool of one connection
	cfg.MaxConns = 1
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	fresh := New(pool) // no room rate cached
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	got, ahead, err := fresh.RecordSending(ctx, key, 0, nil, 1)
	if err != nil {
		t.Fatalf("RecordSending on a one-connection pool: %v", err)
	}
	if len(got.Lines) == 0 || len(ahead) != 1 {
		t.Fatalf("RecordSending read %d lines and %d requests ahead, want the request and 1 ahead", len(got.Lines), len(ahead))
	}
	sent := 0
	if err := fresh.SentVersions(ctx, req.Channel, today, func(SentVersion) error { sent++; return nil }); err != nil {
		t.Fatal(err)
	}
	if sent == 0 {
		t.Fatal("no sent version recorded")
	}
}

func TestCellStatesShowUnacknowledgedDesiredCells(t *testing.T) {
	ctx := context.Background()
	s := testStore(t)
	minLOS, stop := 2, true
	restr := models.Mutation{ID: "r", PropertyID: "prop_0000abcd", RoomTypeCode: "DBL", RatePlanCode: "BAR",
		Channel: "booking", StayDate: night, Values: models.Values{MinLOS: &minLOS, StopSell: &stop}, Version: 5}
	v1 := price("v1", 1, "80.00", 0)
	if _, err := s.RecordDesired(ctx, []models.Mutation{restr, v1}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.RecordAcknowledged(ctx, Ack{BatchID: "b", Request: requestOf(t, v1), ConfirmationID: "c1"}); err != nil {
		t.Fatal(err)
	}
	// v2 is applied by the channel but its answer is lost: desired moves on, the
	// acknowledgement stays at v1, and the cell shows as drifted — to be re-sent at v2.
	if _, err := s.RecordDesired(ctx, []models.Mutation{price("v2", 2, "95.50", 0)}); err != nil {
		t.Fatal(err)
	}
	states := cellStates(t, s)
	if len(states) != 2 {
		t.Fatalf("got %d states, want 2", len(states))
	}
	rates, restrictions := states[0], states[1]
	if rates.Family != models.FamilyRates || !rates.Drifted() || rates.Desired.Amount.String() != "95.5" ||
		rates.Acked.Version != 1 || rates.Acked.Amount.String() != "80" || rates.Desired.Currency != "EUR" {
		t.Errorf("rates: %+v", rates)
	}
	repair := models.MutationOf(rates.Cell, rates.Family, rates.Desired)
	if repair.Version != 2 || repair.Amount.String() != "95.5" {
		t.Errorf("repair from desired state: %+v", repair)
	}
	if restrictions.Family != models.FamilyRestrictions || !restrictions.Drifted() || restrictions.Acked.Version != 0 ||
		*restrictions.Desired.MinLOS != 2 || !*restrictions.Desired.StopSell || restrictions.Desired.CTA != nil {
		t.Errorf("restrictions: %+v", restrictions)
	}
}

func TestConcurrentSendsAndAcksKeepTheNewestVersion(t *testing.T) {
	ctx := context.Background()
	s := testStore(t)
	for round := range 10 {
		older, newer := requestOf(t, price("o", 1, "80", round)), requestOf(t, price("n", 2, "95", round))
		var wg sync.WaitGroup
		errs := make([]error, 4)
		batch := fmt.Sprintf("b%d", round)
		wg.Go(func() { errs[0] = s.RecordSent(ctx, older) })
		wg.Go(func() { errs[1] = s.RecordSent(ctx, newer) })
		wg.Go(func() {
			_, _, errs[2] = s.RecordAcknowledged(ctx, Ack{BatchID: batch, Request: older, ConfirmationID: "c1"})
		})
		wg.Go(func() {
			_, _, errs[3] = s.RecordAcknowledged(ctx, Ack{BatchID: batch, Request: newer, ConfirmationID: "c2"})
		})
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("round %d writer %d: %v", round, i, err)
			}
		}
		if o, _ := s.Outcomes(ctx, batch, "n"); len(o) != 1 || o[0].Outcome != models.OutcomeCommitted {
			t.Fatalf("round %d: the newer version's outcome %+v", round, o)
		}
	}
	for _, c := range cellStates(t, s) {
		if c.SentVersion != 2 || c.Acked.Version != 2 || c.Acked.Amount.String() != "95" || c.ConfirmationID != "c2" {
			t.Errorf("%s: sent v%d, acked v%d %s %q; want v2 95 c2", c.Cell.StayDate, c.SentVersion,
				c.Acked.Version, c.Acked.Amount, c.ConfirmationID)
		}
	}
}

func TestConcurrentBatchesOverTheSameCellsDoNotDeadlock(t *testing.T) {
	ctx := context.Background()
	s := testStore(t)
	var forward []models.Mutation
	for day := range 300 {
		for _, room := range []string{"DBL", "SGL", "TWN"} {
			m := price(fmt.Sprintf("%s-%d", room, day), 1, "80", day)
			m.RoomTypeCode = room
			forward = append(forward, m)
		}
	}
	for round := range 5 {
		// The same cells in opposite orders, at versions that alternate winners.
		a, b := make([]models.Mutation, len(forward)), make([]models.Mutation, len(forward))
		for i, m := range forward {
			m.Version = int64(2*round + i%2)
			a[i] = m
			m.Version = int64(2*round + 1 - i%2)
			b[len(b)-1-i] = m
		}
		var wg sync.WaitGroup
		errs := make([]error, 4)
		wg.Go(func() { _, errs[0] = s.RecordDesired(ctx, a) })
		wg.Go(func() { _, errs[1] = s.RecordDesired(ctx, b) })
		wg.Go(func() { errs[2] = s.RecordSent(ctx, requestOf(t, a[:90]...)) })
		wg.Go(func() { errs[3] = s.RecordSent(ctx, requestOf(t, b[len(b)-90:]...)) })
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("round %d writer %d: %v", round, i, err)
			}
		}
	}
	for _, c := range cellStates(t, s) {
		if c.Desired.Version != 9 {
			t.Fatalf("%s %s: desired v%d, want v9 (the newest of the last round)", c.Cell.RoomTypeCode, c.Cell.StayDate, c.Desired.Version)
		}
	}
}
