package activities

import "context"

// ReleaseBatch drops a finished batch's payload and stored requests; BatchSync calls
// it once every update has an outcome. Outcomes and dead letters stay.
func (a *Activities) ReleaseBatch(ctx context.Context, batchID string) error {
	return a.Store.ReleaseBatch(ctx, batchID)
}
