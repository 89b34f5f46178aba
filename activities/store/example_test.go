package store_test

import (
	"context"
	"fmt"
	"log"

	"github.com/paritysync/paritysync/activities/store"
	"github.com/paritysync/paritysync/models"
)

// PrepareBatch: record the desired state, drop what a newer version overtook, record
// the outcomes decided here, store the chunks.
func ExampleStore_RecordDesired() {
	ctx := context.Background()
	st, err := store.Open(ctx, models.DefaultSettings().DatabaseURL)
	if err != nil {
		log.Fatal(err)
	}
	defer st.Close()
	const batchID = "b-42"
	var valid []models.Mutation // validated mutations of the batch

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
	fmt.Println("chunk", key)
}

// PushRequest: read the request, record it as sent once the gate admitted it, send
// it, record the acknowledgement and the outcomes.
func ExampleStore_RecordAcknowledged() {
	ctx := context.Background()
	st, err := store.Open(ctx, models.DefaultSettings().DatabaseURL)
	if err != nil {
		log.Fatal(err)
	}
	defer st.Close()
	in := models.PushInput{BatchID: "b-42", ChunkKey: "batch/b-42/booking/p3/0", Index: 0}

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
}
