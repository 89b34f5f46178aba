package store

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/paritysync/paritysync/activities/store/storetest"
	"github.com/paritysync/paritysync/models"
)

// testSchema creates a schema of its own for one test, drops it when the test ends
// and returns the URL that selects it.
func testSchema(tb testing.TB) string {
	tb.Helper()
	return storetest.Schema(tb, "storetest")
}

// openStore opens a store on url, closed when the test ends.
func openStore(tb testing.TB, url string, opts ...Option) *Store {
	tb.Helper()
	s, err := Open(context.Background(), url, opts...)
	if err != nil {
		tb.Fatalf("open: %v", err)
	}
	tb.Cleanup(s.Close)
	return s
}

// testStore is a migrated store in a schema of its own.
func testStore(tb testing.TB, opts ...Option) *Store {
	tb.Helper()
	s := openStore(tb, testSchema(tb), opts...)
	if err := s.Migrate(context.Background()); err != nil {
		tb.Fatalf("migrate: %v", err)
	}
	return s
}

var night = models.Date{Year: 2026, Month: time.December, Day: 24}

// price is a rates mutation of the test cell on night+day.
func price(id string, version int64, amount string, day int) models.Mutation {
	a := decimal.RequireFromString(amount)
	return models.Mutation{ID: id, PropertyID: "prop_0000abcd", RoomTypeCode: "DBL", RatePlanCode: "BAR",
		Channel: "booking", StayDate: night.AddDays(day), Values: models.Values{Amount: &a, Currency: "EUR"}, Version: version}
}

// chunkAhead records three rates mutations of the test cell on the 10th to 12th
// night from today and saves, as batchID's chunk, their request twice; it returns
// the chunk's key and the request.
func chunkAhead(tb testing.TB, s *Store, batchID string) (string, models.ChannelRequest) {
	tb.Helper()
	ctx := context.Background()
	today := models.DateOf(time.Now())
	ms := make([]models.Mutation, 3)
	for i := range ms {
		ms[i] = price(fmt.Sprintf("%s-%d", batchID, i), 2, "90", 0)
		ms[i].StayDate = today.AddDays(10 + i)
	}
	if _, err := s.RecordDesired(ctx, ms); err != nil {
		tb.Fatal(err)
	}
	req := requestOf(tb, ms...)
	key, err := s.SaveChunk(ctx, batchID, models.Chunk{Channel: req.Channel, Priority: req.Priority},
		[]models.ChannelRequest{req, req})
	if err != nil {
		tb.Fatal(err)
	}
	return key, req
}

// rowCount is the number of rows in table.
func rowCount(tb testing.TB, s *Store, table string) int {
	tb.Helper()
	var n int
	if err := s.pool.QueryRow(context.Background(), `SELECT count(*) FROM `+table).Scan(&n); err != nil {
		tb.Fatalf("count %s: %v", table, err)
	}
	return n
}

// requestOf is the coalesced request carrying ms, which must make exactly one.
func requestOf(tb testing.TB, ms ...models.Mutation) models.ChannelRequest {
	tb.Helper()
	co := models.Coalesce(ms, nil)
	if len(co.Requests) != 1 {
		tb.Fatalf("want 1 request, got %d", len(co.Requests))
	}
	return co.Requests[0]
}

func TestMigrateTwiceAndConcurrently(t *testing.T) {
	ctx := context.Background()
	url := testSchema(t)
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		s := openStore(t, url)
		wg.Go(func() { errs[i] = s.Migrate(ctx) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("concurrent migrate %d: %v", i, err)
		}
	}
	s := openStore(t, url)
	if err := s.Migrate(ctx); err != nil {
		t.Fatalf("second migrate: %v", err)
	}
	ms, err := loadMigrations()
	if err != nil {
		t.Fatal(err)
	}
	if applied := rowCount(t, s, "schema_migrations"); applied != len(ms) {
		t.Errorf("schema_migrations holds %d rows, want one per migration (%d)", applied, len(ms))
	}
	v, err := s.SchemaVersion(ctx)
	if err != nil || v != ms[len(ms)-1].version {
		t.Errorf("SchemaVersion = %d, %v; want %d", v, err, ms[len(ms)-1].version)
	}
}

func TestMigrateRefusesAnEditedMigration(t *testing.T) {
	ctx := context.Background()
	s := testStore(t)
	if _, err := s.pool.Exec(ctx, `UPDATE schema_migrations SET sha256 = 'edited' WHERE version = 1`); err != nil {
		t.Fatal(err)
	}
	if err := s.Migrate(ctx); err == nil {
		t.Fatal("Migrate accepted an applied migration whose text changed")
	}
}

func TestSchemaVersionOfAnEmptySchemaIsZero(t *testing.T) {
	s := openStore(t, testSchema(t))
	if v, err := s.SchemaVersion(context.Background()); err != nil || v != 0 {
		t.Fatalf("SchemaVersion = %d, %v; want 0, nil", v, err)
	}
}

func TestLookingUpKnownKeysDrawsNoNewIDs(t *testing.T) {
	ctx := context.Background()
	s := testStore(t)
	r := requestOf(t, price("a", 1, "80", 0))
	for i := range 5 {
		// A fresh store each time: no cache, as after a worker restart.
		w := New(s.pool)
		if err := w.RecordSent(ctx, r); err != nil {
			t.Fatal(err)
		}
		if _, err := w.RecordOutcomes(ctx, "b", []MutationOutcome{{MutationID: fmt.Sprint(i), Channel: "booking", Outcome: models.OutcomeRejected}}); err != nil {
			t.Fatal(err)
		}
	}
	other := price("b", 1, "80", 0)
	other.RoomTypeCode, other.Channel = "SGL", "expedia"
	if err := s.RecordSent(ctx, requestOf(t, other)); err != nil {
		t.Fatal(err)
	}
	for table, want := range map[string]int{"room_rates": 2, "channels": 2, "batches": 1} {
		var maxID int
		if err := s.pool.QueryRow(ctx, "SELECT max(id) FROM "+table).Scan(&maxID); err != nil || maxID != want {
			t.Errorf("%s: max id %d (%v), want %d: known keys drew ids", table, maxID, err, want)
		}
	}
}
