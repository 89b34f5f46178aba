package ops

import (
	"context"

	"github.com/paritysync/paritysync/activities/store"
	"github.com/paritysync/paritysync/models"
)

// Rejections is every rejected outcome of a batch as the store holds them, with
// each field and rule; an empty list (not nil) for none.
func Rejections(ctx context.Context, st *store.Store, batchID string) ([]store.MutationOutcome, error) {
	list := []store.MutationOutcome{}
	err := st.BatchOutcomes(ctx, batchID, models.OutcomeRejected, func(o store.MutationOutcome) error {
		list = append(list, o)
		return nil
	})
	return list, err
}

// MutationOutcomes is one mutation's outcomes in a batch, one per endpoint family;
// an empty list (not nil) while it has none.
func MutationOutcomes(ctx context.Context, st *store.Store, batchID, mutationID string) ([]store.MutationOutcome, error) {
	list, err := st.Outcomes(ctx, batchID, mutationID)
	if list == nil {
		list = []store.MutationOutcome{}
	}
	return list, err
}
