package ops

import (
	"context"
	"errors"
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
	batchID := TimedBatchID(idPrefix+"replay-", time.Now(), uuid.NewString()[:8])
	started, err := StartBatch(ctx, tc, queue, st, Batch{ID: batchID, Mutations: ms, ResendSalt: batchID})
	if err != nil {
		return r, err
	}
	r.Started = started
	if r.Acked, err = st.AckDeadLetters(ctx, DeadLetterIDs(entries), "replayed as batch "+batchID); err != nil {
		return r, err
	}
	return r, nil
}

// DeadLetterIDs are the ids of entries, in their order (an empty list for none).
func DeadLetterIDs(entries []store.DeadLetter) []int64 {
	ids := make([]int64, len(entries))
	for i, e := range entries {
		ids[i] = e.ID
	}
	return ids
}

// DeadLetterSelection picks dead letters by id, or by channel, reason and batch
// (zero fields select everything); open ones only unless Acked.
type DeadLetterSelection struct {
	IDs     []int64
	Channel string
	Reason  string
	BatchID string
	Acked   bool
}

// Empty reports whether nothing narrows the selection.
func (s DeadLetterSelection) Empty() bool {
	return len(s.IDs) == 0 && s.Channel == "" && s.Reason == "" && s.BatchID == ""
}

// EachDeadLetter calls fn with every dead letter sel picks, oldest first (by id
// order when IDs are given), a page of pageSize at a time; an id that names no dead
// letter is an error wrapping store.ErrDeadLetterNotFound.
func EachDeadLetter(ctx context.Context, st *store.Store, sel DeadLetterSelection, fn func(store.DeadLetter) error) error {
	if len(sel.IDs) > 0 {
		for _, id := range sel.IDs {
			d, err := st.DeadLetter(ctx, id)
			if err != nil {
				return err
			}
			if d.AckedAt.IsZero() || sel.Acked {
				if err := fn(d); err != nil {
					return err
				}
			}
		}
		return nil
	}
	f := store.DeadLetterFilter{Channel: sel.Channel, Reason: sel.Reason, BatchID: sel.BatchID, Acked: sel.Acked, Limit: pageSize}
	for {
		page, err := st.DeadLetters(ctx, f)
		if err != nil {
			return err
		}
		for _, d := range page {
			if err := fn(d); err != nil {
				return err
			}
		}
		if len(page) < f.Limit {
			return nil
		}
		f.AfterID = page[len(page)-1].ID
	}
}

// ExportFlushEvery is how many exported entries go out between flushes.
const ExportFlushEvery = 100

// pageSize is how many dead letters one statement of EachDeadLetter reads.
const pageSize = 1000

// SelectDeadLetters is every dead letter sel picks, oldest first.
func SelectDeadLetters(ctx context.Context, st *store.Store, sel DeadLetterSelection) ([]store.DeadLetter, error) {
	var out []store.DeadLetter
	err := EachDeadLetter(ctx, st, sel, func(d store.DeadLetter) error {
		out = append(out, d)
		return nil
	})
	return out, err
}

// Acked is what AckDeadLetters did.
type Acked struct {
	// Acknowledged counts the entries that were open before; IDs are every entry
	// selected.
	Acknowledged int     `json:"acknowledged"`
	IDs          []int64 `json:"ids"`
}

// AckDeadLetters acknowledges the open dead letters sel picks, with note, so they
// leave the open list (and are pruned after their retention). An empty selection
// is refused: acknowledging every dead letter is never a default.
func AckDeadLetters(ctx context.Context, st *store.Store, sel DeadLetterSelection, note string) (Acked, error) {
	out := Acked{IDs: []int64{}}
	if sel.Empty() {
		return out, ErrNoSelection
	}
	sel.Acked = false
	entries, err := SelectDeadLetters(ctx, st, sel)
	if err != nil {
		return out, err
	}
	out.IDs = DeadLetterIDs(entries)
	if len(out.IDs) == 0 {
		return out, nil
	}
	out.Acknowledged, err = st.AckDeadLetters(ctx, out.IDs, note)
	return out, err
}

// ErrNoSelection refuses a dead-letter action that names no entries.
var ErrNoSelection = errors.New("select dead letters by ids, channel, reason or batch")
