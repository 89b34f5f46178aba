package activities

import (
	"context"
	"time"

	"go.temporal.io/sdk/activity"

	"github.com/paritysync/paritysync/activities/store"
)

// PruneStore deletes what outlived its retention in the store (store.DefaultRetention);
// the nightly reconciliation calls it.
func (a *Activities) PruneStore(ctx context.Context) (store.Pruned, error) {
	p, err := a.Store.Prune(ctx, store.DefaultRetention())
	if err != nil {
		return p, err
	}
	if _, err := a.Store.PruneStaged(ctx, a.now().Add(-stagedRetention)); err != nil {
		return p, err
	}
	if _, err := a.Store.PrunePosts(ctx, a.now().Add(-store.DefaultRetention().Outcomes)); err != nil {
		return p, err
	}
	activity.GetLogger(ctx).Info("store pruned", "cells", p.Cells, "payloads", p.Payloads, "requests", p.Requests,
		"batches", p.Batches, "dead_letters", p.DeadLetters)
	return p, nil
}

// stagedRetention is how long a staged submission waits for its admission: far
// longer than any submit update takes, so only refused or lost ones are pruned.
const stagedRetention = 24 * time.Hour
