// Package activities holds paritysync's Temporal activities: methods on Activities,
// which holds their dependencies, one job to a file (prepare, push in its decide,
// send and settle steps, reserve, dead letters, cancel, finish, release, prune,
// reconcile, the smoother's claim check). Register names them as the contract does.
package activities

import (
	"errors"
	"fmt"
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/paritysync/paritysync/activities/store"
	"github.com/paritysync/paritysync/channels"
	"github.com/paritysync/paritysync/limiter"
	"github.com/paritysync/paritysync/models"
)

// Activities are paritysync's Temporal activities; the struct holds their dependencies.
type Activities struct {
	Limiter *limiter.Limiter
	Client  *channels.Client
	Tokens  channels.Credentials
	// Store is the system of record (PostgreSQL).
	Store     *store.Store
	Channels  map[string]models.ChannelConfig
	Validator *models.Validator
	// Mappings, when set, is the channels' configuration with the codes stored over
	// the API: PrepareBatch validates against it, so a property mapped after the
	// start is not refused as unmapped.
	Mappings *store.Mappings
	// ChunkSize is how many requests one ChannelSync child pushes.
	ChunkSize int
	// MaxInFlight bounds the pushes a batch keeps in flight per channel
	// (models.PlanInFlight); zero means models.DefaultMaxInFlight.
	MaxInFlight int
	// ShortWait is the longest wait for a held slot spent inside the activity rather
	// than in a durable timer; models.DefaultShortWait when zero.
	ShortWait time.Duration
	// Now is the clock for ledger and dead-letter timestamps.
	Now func() time.Time
	// Metrics may be nil.
	Metrics *Metrics

	rebuilds gateRebuilds
	// ahead and held are what this worker already knows of a lane's next request
	// (read with the current one) and of its held slot (from the current push's
	// Settle), so the next push on this worker skips a read and a decision.
	ahead requestCache
	held  heldSlots
}

func (a *Activities) now() time.Time {
	if a.Now != nil {
		return a.Now()
	}
	return time.Now()
}

// FailureError is the typed, non-retryable error of kind errType carrying f.
func FailureError(errType string, f models.Failure) error {
	msg := errType
	if f.Status != 0 {
		msg = fmt.Sprintf("%s: status %d", errType, f.Status)
	}
	if f.Message != "" {
		msg += ": " + f.Message
	}
	opts := temporal.ApplicationErrorOptions{NonRetryable: true, Details: []any{f}}
	if errType == models.ErrRateLimited || errType == models.ErrThrottled {
		// Waiting for budget is normal operation: benign errors are logged at debug
		// level and do not count as failures in the SDK's metrics.
		opts.Category = temporal.ApplicationErrorCategoryBenign
	}
	return temporal.NewApplicationErrorWithOptions(msg, errType, opts)
}

// payloadError turns a store.ErrBatchNotFound into the typed models.ErrPayloadLost and
// passes any other error through (Temporal retries it within its bound).
func payloadError(err error) error {
	if errors.Is(err, store.ErrBatchNotFound) {
		return FailureError(models.ErrPayloadLost, models.Failure{Message: err.Error()})
	}
	return err
}
