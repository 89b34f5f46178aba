package store_test

import (
	"context"
	"fmt"
	"log"

	"github.com/shopspring/decimal"

	"github.com/paritysync/paritysync/activities/store"
	"github.com/paritysync/paritysync/activities/store/storetest"
	"github.com/paritysync/paritysync/models"
)

// exampleStore is a migrated store in a schema of its own on the test database
// (a worker opens PARITYSYNC_DATABASE_URL); done closes it and drops the schema. TestMain has
// checked that the database answers.
func exampleStore(ctx context.Context) (st *store.Store, done func()) {
	url, drop, err := storetest.NewSchema("storeexample")
	if err != nil {
		log.Fatal(err)
	}
	st, err = store.Open(ctx, url)
	if err != nil {
		log.Fatal(err)
	}
	if err := st.Migrate(ctx); err != nil {
		log.Fatal(err)
	}
	return st, func() {
		st.Close()
		if err := drop(); err != nil {
			log.Print(err)
		}
	}
}

// exampleMutations is one validated price change: property prop_0000abcd, room
// DBL, rate BAR, on booking.
func exampleMutations() []models.Mutation {
	a := decimal.RequireFromString("95.00")
	return []models.Mutation{{ID: "m-1", PropertyID: "prop_0000abcd", RoomTypeCode: "DBL", RatePlanCode: "BAR",
		Channel: "booking", StayDate: models.Date{Year: 2030, Month: 4, Day: 10}, Values: models.Values{Amount: &a, Currency: "EUR"}, Version: 7}}
}

// PrepareBatch: record the desired state, drop what a newer version overtook, record
// the outcomes decided here, store the chunks.
func ExampleStore_RecordDesired() {
	ctx := context.Background()
	st, done := exampleStore(ctx)
	defer done()
	const batchID = "b-42"
	valid := exampleMutations() // validated mutations of the batch

	stale, err := st.RecordDesired(ctx, valid)
	if err != nil {
		log.Fatal(err)
	}
	drop := map[string][]models.Family{}
	for _, s := range stale {
		drop[s.ID] = append(drop[s.ID], s.Family)
	}
	fresh := valid[:0]
	for _, m := range valid {
		for _, f := range drop[m.ID] {
			m = m.Without(f)
		}
		if len(m.Families()) > 0 {
			fresh = append(fresh, m)
		}
	}
	co := models.Coalesce(fresh, nil)
	var decided []store.MutationOutcome
	for _, s := range append(stale, co.Superseded...) {
		decided = append(decided, store.MutationOutcome{MutationID: s.ID, Channel: s.Channel, Family: s.Family,
			Outcome: models.OutcomeSuperseded, Reason: fmt.Sprintf("version %d won", s.By)})
	}
	if _, err := st.RecordOutcomes(ctx, batchID, decided); err != nil {
		log.Fatal(err)
	}
	key, err := st.SaveChunk(ctx, batchID, models.Chunk{Channel: "booking", Priority: 3}, co.Requests)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("chunk", key, "with", len(co.Requests), "request")
	// Output:
	// chunk batch/b-42/booking/p3/0 with 1 request
}

// PushRequest: read the request, record it as sent once the gate admitted it, send
// it, record the acknowledgement and the outcomes.
func ExampleStore_RecordAcknowledged() {
	ctx := context.Background()
	st, done := exampleStore(ctx)
	defer done()
	in := models.PushInput{BatchID: "b-42", ChunkKey: prepareExample(ctx, st, "b-42"), Index: 0}

	req, err := st.Request(ctx, in.ChunkKey, in.Index)
	if err != nil {
		log.Fatal(err) // ErrBatchNotFound: park the updates, they are re-sent from the desired state
	}
	// … the limiter's Reserve admitted req through the ordering gate …
	if err := st.RecordSent(ctx, req); err != nil {
		log.Fatal(err)
	}
	// … the channel answered 2xx with confirmation "conf-1" …
	committed, superseded, err := st.RecordAcknowledged(ctx, store.Ack{BatchID: in.BatchID, Request: req, ConfirmationID: "conf-1"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(committed, "committed,", superseded, "superseded")
	// Output:
	// 1 committed, 0 superseded
}

// prepareExample is what PrepareBatch did before PushRequest runs: the desired
// state recorded and the batch's one chunk saved; it returns the chunk's key.
func prepareExample(ctx context.Context, st *store.Store, batchID string) string {
	ms := exampleMutations()
	if _, err := st.RecordDesired(ctx, ms); err != nil {
		log.Fatal(err)
	}
	key, err := st.SaveChunk(ctx, batchID, models.Chunk{Channel: "booking", Priority: 3}, models.Coalesce(ms, nil).Requests)
	if err != nil {
		log.Fatal(err)
	}
	return key
}
