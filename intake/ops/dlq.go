package ops

import (
	"context"
	"time"

	"github.com/google/uuid"
	"go.temporal.io/sdk/client"

	"github.com/paritysync/paritysync/activities/store"
	"github.com/paritysync/paritysync/models"
)

// Replay is a dead-letter replay that was started.
type Replay struct {
	Started
	Entries int
	Updates int
	Acked   int
}

// ReplayDeadLetters re-sends entries as one new batch and acknowledges them. Each
// parked update goes at the version it carried: the batch records it as desired,
// so one whose cell moved on to a newer version since is superseded and never sent.
// The batch re-sends content the channel may have seen, so it carries a fresh
// idempotency salt. Its batch id is idPrefix followed by replay-<time>-<random>: the
// HTTP API passes "<tenant>." so the tenant who replayed can read the batch. With
// no entries it starts nothing.
func ReplayDeadLetters(ctx context.Context, tc client.Client, queue string, st *store.Store, idPrefix string, entries []store.DeadLetter) (Replay, error) {
	r := Replay{Entries: len(entries)}
	if len(entries) == 0 {
		return r, nil
	}
	var ms []models.Mutation
	for _, e := range entries {
		ms = append(ms, e.Mutations()...)
	}
	r.Updates = len(ms)
	batchID := idPrefix + "replay-" + time.Now().UTC().Format("20060102-150405") + "-" + uuid.NewString()[:8]
	started, err := StartBatch(ctx, tc, queue, st, Batch{ID: batchID, Mutations: ms, ResendSalt: batchID})
	if err != nil {
		return r, err
	}
	r.Started = started
	ids := make([]int64, len(entries))
	for i, e := range entries {
		ids[i] = e.ID
	}
	if r.Acked, err = st.AckDeadLetters(ctx, ids, "replayed as batch "+batchID); err != nil {
		return r, err
	}
	return r, nil
}
