package activities

import (
	"go.temporal.io/sdk/activity"

	"github.com/paritysync/paritysync/models"
)

// Registry is what Register registers with: a worker, or the SDK's test
// environment.
type Registry interface {
	RegisterActivityWithOptions(a any, options activity.RegisterOptions)
}

// Register registers a's activities with r under the contract's names, which the
// workflows call them by.
func Register(r Registry, a *Activities) {
	for _, act := range a.named() {
		r.RegisterActivityWithOptions(act.fn, activity.RegisterOptions{Name: act.name})
	}
}

// namedActivity is one activity under its contract name.
type namedActivity struct {
	name string
	fn   any
}

// named lists a's activities, each under its contract name.
func (a *Activities) named() []namedActivity {
	return []namedActivity{
		{models.ActivityPrepareBatch, a.PrepareBatch},
		{models.ActivityPushRequest, a.PushRequest},
		{models.ActivityReserveSlots, a.ReserveSlots},
		{models.ActivityRecordDeadLetter, a.RecordDeadLetter},
		{models.ActivityCancelBatch, a.CancelBatch},
		{models.ActivityReleaseBatch, a.ReleaseBatch},
		{models.ActivityFinishBatch, a.FinishBatch},
		{models.ActivityPruneStore, a.PruneStore},
		{models.ActivityDiffChannel, a.DiffChannel},
		{models.ActivityRebuildGate, a.RebuildGate},
		{models.ActivityAdmitChanges, a.AdmitChanges},
		{models.ActivityWaitingChanges, a.WaitingChanges},
		{models.ActivityTakeChanges, a.TakeChanges},
		{models.ActivityCloseBatch, a.CloseBatch},
	}
}
