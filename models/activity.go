package models

import (
	"encoding/json"
	"time"
)

// Activity names, as the worker registers them and the workflows call them. Each is
// the name of the activities.Activities method it runs, the name recorded histories
// carry: renaming one breaks their replay.
const (
	ActivityPrepareBatch     = "PrepareBatch"
	ActivityPushRequest      = "PushRequest"
	ActivityReserveSlots     = "ReserveSlots"
	ActivityRecordDeadLetter = "RecordDeadLetter"
	ActivityCancelBatch      = "CancelBatch"
	ActivityReleaseBatch     = "ReleaseBatch"
	ActivityFinishBatch      = "FinishBatch"
	ActivityPruneStore       = "PruneStore"
	ActivityDiffChannel      = "DiffChannel"
	ActivityRebuildGate      = "RebuildGate"
	ActivityAdmitChanges     = "AdmitChanges"
	ActivityWaitingChanges   = "WaitingChanges"
	ActivityTakeChanges      = "TakeChanges"
	ActivityCloseBatch       = "CloseBatch"
)

// Error types of the typed, non-retryable errors PushRequest returns. The workflow
// tells them apart by type and waits or dead-letters; Temporal never retries them.
const (
	ErrRateLimited    = "RateLimited"    // the limiter said wait (held slot, pause, back-off): wait, then ask again
	ErrThrottled      = "Throttled"      // the channel answered 429/503 with or without Retry-After
	ErrTransient      = "Transient"      // 5xx, timeout, network: back off, bounded attempts
	ErrAuthExpired    = "AuthExpired"    // 401: refresh the credential once
	ErrQuotaExhausted = "QuotaExhausted" // daily budget spent: wait for the reset (Failure.Wait), then go again
	ErrRejected       = "Rejected"       // other 4xx: dead-letter now
	// ErrPayloadLost means a batch's stored payload or request is gone (released or
	// past its retention): retrying cannot bring it back. The updates are parked
	// where they are known, and reconciliation re-sends the desired state.
	ErrPayloadLost = "PayloadLost"
)

// NonRetryableErrors lists the typed errors for activity RetryPolicies.
var NonRetryableErrors = []string{ErrRateLimited, ErrThrottled, ErrTransient, ErrAuthExpired, ErrQuotaExhausted,
	ErrRejected, ErrPayloadLost}

// DefaultShortWait is how long PushRequest waits in process for a held slot; a
// longer wait comes back to the workflow for a durable timer.
const DefaultShortWait = 2 * time.Second

// Failure is the detail every typed PushRequest error carries.
type Failure struct {
	// Wait is how long to wait before trying again (rate limited, throttled).
	Wait time.Duration `json:"wait"`
	// ServerWait is true when the channel said how long (Retry-After).
	ServerWait bool   `json:"server_wait"`
	Status     int    `json:"status,omitempty"`
	Message    string `json:"message,omitempty"`
	// Tier is the limiter's quota tier when the wait is the daily quota's.
	Tier string `json:"tier,omitempty"`
	// Paused is the operator's reason when the channel is paused.
	Paused string `json:"paused,omitempty"`
	// Held is true when the wait is for a slot the limiter holds for the request.
	Held bool `json:"held,omitempty"`
}

type plainFailure Failure

// failureJSON is Failure with its wait readable in the Temporal UI.
type failureJSON struct {
	plainFailure
	Wait Duration `json:"wait"`
}

// MarshalJSON writes the wait as a duration string ("20s").
func (f Failure) MarshalJSON() ([]byte, error) {
	return json.Marshal(failureJSON{plainFailure(f), Duration(f.Wait)})
}

// UnmarshalJSON reads the wait as a duration string or nanoseconds (histories
// recorded before).
func (f *Failure) UnmarshalJSON(b []byte) error {
	var v failureJSON
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*f = Failure(v.plainFailure)
	f.Wait = time.Duration(v.Wait)
	return nil
}
