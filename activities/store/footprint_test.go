package store

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/paritysync/paritysync/activities/store/storetest"
	"github.com/paritysync/paritysync/models"
	"github.com/paritysync/paritysync/otasim/sample"
)

// footprint is what batches of mutations cost in PostgreSQL after they ran through
// every write the push engine makes: claim check, desired state, chunks, sent
// versions, acknowledgements and outcomes.
type footprint struct {
	mutations int // per batch
	rounds    int // batches over the same cells, each at a newer version
	cells     int // rows of table cells: one per cell and family
	requests  int
	// Tables cells, room_rates, confirmations and channels with their indexes:
	// after the first batch as written (the dead row versions of the sent and ack
	// updates included), after the last batch with a plain VACUUM (autovacuum's)
	// between batches, and after VACUUM FULL (the live rows only).
	cellBytesFirst, cellBytesSteady, cellBytesLive int64
	// payloadBytes is the claim check and the stored requests of one batch, kept
	// until the batch is released.
	payloadBytes int64
	// outcomeBytes is table outcomes with its index after the first batch, kept for
	// the retention.
	outcomeBytes int64
	timings      []string
}

func (f footprint) String() string {
	per := func(b int64) float64 { return float64(b) / float64(f.cells) }
	scale := func(b int64) float64 { return float64(b) * 100000 / float64(f.mutations) / 1e6 }
	return fmt.Sprintf(`%d batches of %d mutations over the same %d cell rows (cell × family), %d requests each
  cells: %5.1f B per cell after one batch as written, %5.1f B after %d batches (plain VACUUM between),
         %5.1f B live (VACUUM FULL)
  per 100k-mutation batch: %.2f MB claim check + stored requests (until released),
                           %.2f MB outcomes (kept %s), %.2f MB cells after one batch
  timings of the first batch: %s`,
		f.rounds, f.mutations, f.cells, f.requests,
		per(f.cellBytesFirst), per(f.cellBytesSteady), f.rounds, per(f.cellBytesLive),
		scale(f.payloadBytes), scale(f.outcomeBytes), DefaultRetention().Outcomes, scale(f.cellBytesFirst),
		strings.Join(f.timings, ", "))
}

// measureFootprint runs rounds sample batches of n mutations through the store as
// the push engine would, each at a newer version of the same cells, and measures
// the tables.
func measureFootprint(tb testing.TB, n, rounds int) footprint {
	ctx := context.Background()
	// A database of its own: what VACUUM may reclaim must not depend on the
	// transactions of the tests running beside this one.
	s := openStore(tb, storetest.Database(tb, "footprint"))
	if err := s.Migrate(ctx); err != nil {
		tb.Fatalf("migrate: %v", err)
	}
	f := footprint{mutations: n, rounds: rounds}
	must := func(err error) {
		tb.Helper()
		if err != nil {
			tb.Fatal(err)
		}
	}
	size := func(tables ...string) int64 {
		var total int64
		for _, t := range tables {
			var b int64
			must(s.pool.QueryRow(ctx, `SELECT pg_total_relation_size($1::regclass)`, t).Scan(&b))
			total += b
		}
		return total
	}
	cellTables := []string{"cells", "room_rates", "confirmations", "channels"}
	today := models.DateOf(time.Now())
	for round := 1; round <= rounds; round++ {
		batchID := fmt.Sprintf("footprint-%d", round)
		lap := func(what string, start time.Time) {
			if round == 1 {
				f.timings = append(f.timings, fmt.Sprintf("%s %s", what, time.Since(start).Round(time.Millisecond)))
			}
		}
		ms := sample.Batch(n, today, int64(2*round), 7)
		f.requests = runBatch(tb, s, batchID, ms, lap)
		if round == 1 {
			must(s.pool.QueryRow(ctx, `SELECT count(*) FROM cells`).Scan(&f.cells))
			f.cellBytesFirst = size(cellTables...)
			f.payloadBytes = size("batches", "batch_requests")
			f.outcomeBytes = size("outcomes")
		}
		must(s.ReleaseBatch(ctx, batchID))
		for _, t := range cellTables {
			_, err := s.pool.Exec(ctx, "VACUUM "+t)
			must(err)
		}
	}
	f.cellBytesSteady = size(cellTables...)
	for _, t := range cellTables {
		_, err := s.pool.Exec(ctx, "VACUUM FULL "+t)
		must(err)
	}
	f.cellBytesLive = size(cellTables...)
	return f
}

// runBatch takes ms through every write the push engine makes for batch batchID
// and checks its outcomes add up; it returns the number of requests.
func runBatch(tb testing.TB, s *Store, batchID string, ms []models.Mutation, lap func(string, time.Time)) int {
	ctx := context.Background()
	must := func(err error) {
		tb.Helper()
		if err != nil {
			tb.Fatal(err)
		}
	}
	n := len(ms)
	invalid := max(1, n/100) // SampleBatch puts its invalid rows last
	valid, bad := ms[:n-invalid], ms[n-invalid:]

	start := time.Now()
	_, err := s.SaveBatch(ctx, batchID, ms)
	must(err)
	lap("SaveBatch", start)

	start = time.Now()
	stale, err := s.RecordDesired(ctx, valid)
	must(err)
	lap("RecordDesired", start)
	var decided []MutationOutcome
	for _, m := range bad {
		decided = append(decided, MutationOutcome{MutationID: m.ID, Channel: m.Channel, Outcome: models.OutcomeRejected, Reason: "invalid"})
	}
	co := models.Coalesce(valid, nil)
	for _, st := range append(stale, co.Superseded...) {
		decided = append(decided, MutationOutcome{MutationID: st.ID, Channel: st.Channel, Family: st.Family,
			Outcome: models.OutcomeSuperseded, Reason: fmt.Sprintf("v%d won", st.By)})
	}
	_, err = s.RecordOutcomes(ctx, batchID, decided)
	must(err)

	start = time.Now()
	var keys []string
	for i := 0; i < len(co.Requests); i += 25 {
		part := co.Requests[i:min(i+25, len(co.Requests))]
		key, err := s.SaveChunk(ctx, batchID, models.Chunk{Channel: part[0].Channel, Priority: part[0].Priority, N: i / 25}, part)
		must(err)
		keys = append(keys, key)
	}
	lap("SaveChunk", start)

	start = time.Now()
	for i, key := range keys {
		for j := 0; ; j++ {
			r, err := s.Request(ctx, key, j)
			if err != nil {
				break
			}
			must(s.RecordSent(ctx, r))
			_, _, err = s.RecordAcknowledged(ctx, Ack{BatchID: batchID, Request: r, ConfirmationID: fmt.Sprintf("%s-%d-%d", batchID, i, j)})
			must(err)
		}
	}
	lap("Request+RecordSent+RecordAcknowledged", start)

	counts, err := s.BatchCounts(ctx, batchID)
	must(err)
	var total models.ChannelCounts
	for _, c := range counts {
		total.Add(c)
	}
	// Every update and every invalid mutation has exactly one outcome.
	if total.Total != n || total.Done() != n {
		tb.Errorf("outcomes of %d mutations: %+v", n, total)
	}
	return len(co.Requests)
}

// TestFootprintPerCell keeps the cost of a cell in check: the Redis ledger took
// 560 B per cell.
func TestFootprintPerCell(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 3 batches of 10,000 mutations")
	}
	f := measureFootprint(t, 10000, 3)
	t.Log("\n" + f.String())
	// A row that grows shows in the first batch as written: 340 B alone, 413 B
	// under make test's load on this 2-core machine, well under the Redis ledger's
	// 560 B. After more batches the figure also holds the dead row versions plain
	// VACUUM has not reclaimed yet, which varies with the writers' and autovacuum's
	// timing: 364 B alone, 461–569 B under make test's load on 2026-12-02; the
	// second bound catches a table that keeps every version.
	if per := float64(f.cellBytesFirst) / float64(f.cells); per > 450 {
		t.Errorf("%.0f B per cell after one batch, want at most 450", per)
	}
	if per := float64(f.cellBytesSteady) / float64(f.cells); per > 700 {
		t.Errorf("%.0f B per cell after %d batches, want at most 700", per, f.rounds)
	}
}

// BenchmarkFootprint100k measures batches of 100k mutations:
//
//	go test -run '^$' -bench Footprint100k -benchtime 1x ./activities/store/
func BenchmarkFootprint100k(b *testing.B) {
	for b.Loop() {
		f := measureFootprint(b, 100000, 3)
		b.ReportMetric(float64(f.cellBytesFirst)/float64(f.cells), "B/cell-1st-batch")
		b.ReportMetric(float64(f.cellBytesSteady)/float64(f.cells), "B/cell-3rd-batch")
		b.ReportMetric(float64(f.cellBytesLive)/float64(f.cells), "B/cell-live")
		b.ReportMetric(float64(f.payloadBytes)/1e6, "MB-payload/batch")
		b.ReportMetric(float64(f.outcomeBytes)/1e6, "MB-outcomes/batch")
		b.Log("\n" + f.String())
	}
}
