// Package workflows holds paritysync's Temporal workflows. Everything here is
// deterministic: time from workflow.Now, waits from workflow.Sleep, jitter from a
// hash of the workflow id, request and attempt.
package workflows

import (
	"fmt"
	"hash/fnv"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/paritysync/paritysync/models"
)

// Defaults applied when an input leaves a knob at zero.
const (
	DefaultMaxRunningChildren = 6
	DefaultWindow             = 4
	// MaxHistory is where a run stops taking new work and continues as new, well
	// under Temporal's 10,000-event guidance.
	MaxHistory = 4000
)

// Search attribute keys.
var (
	attrChannel  = temporal.NewSearchAttributeKeyKeyword(models.SearchAttrChannel)
	attrBatchID  = temporal.NewSearchAttributeKeyKeyword(models.SearchAttrBatchID)
	attrPriority = temporal.NewSearchAttributeKeyInt64(models.SearchAttrPriority)
)

// MaxActivityAttempts bounds Temporal's retries of an infrastructure failure (Redis
// or PostgreSQL unreachable, a worker lost mid-activity): about six minutes of
// backoff, after which the caller parks what it was doing with a reason.
const MaxActivityAttempts = 15

// withActivity sets the options every paritysync activity runs with: Temporal
// retries only infrastructure failures, never the typed channel outcomes, and
// never without a bound.
func withActivity(ctx workflow.Context, timeout time.Duration, priority int) workflow.Context {
	return workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: timeout,
		RetryPolicy: &temporal.RetryPolicy{
			InitialInterval:        time.Second,
			BackoffCoefficient:     2,
			MaximumInterval:        30 * time.Second,
			MaximumAttempts:        MaxActivityAttempts,
			NonRetryableErrorTypes: models.NonRetryableErrors,
		},
		Priority: temporal.Priority{PriorityKey: priority},
		// A cancelled batch waits for an in-flight push to end, so its outcome is
		// recorded before the batch closes the rest as cancelled.
		WaitForCancellation: true,
	})
}

// historyFull reports whether the run should stop taking new work and continue as
// new: its history reached MaxHistory, or the server suggests it.
func historyFull(ctx workflow.Context) bool {
	info := workflow.GetInfo(ctx)
	return info.GetCurrentHistoryLength() >= MaxHistory || info.GetContinueAsNewSuggested()
}

// withDefaults fills the zero fields of a retry policy.
func withDefaults(p models.RetryPolicy) models.RetryPolicy {
	d := models.DefaultRetryPolicy()
	if p.Initial <= 0 {
		p.Initial = d.Initial
	}
	if p.Max <= 0 {
		p.Max = d.Max
	}
	if p.Attempts <= 0 {
		p.Attempts = d.Attempts
	}
	if p.MaxWait <= 0 {
		p.MaxWait = d.MaxWait
	}
	if p.MaxDeferrals <= 0 {
		p.MaxDeferrals = d.MaxDeferrals
	}
	return p
}

// Backoff is the full-jitter exponential wait before attempt (1-based) of a retry:
// uniform in [0, min(max, initial·2^(attempt-1))). The "random" part is a hash of
// key and attempt, so replay computes the same wait.
func Backoff(p models.RetryPolicy, key string, attempt int) time.Duration {
	ceiling := p.Initial
	for i := 1; i < attempt && ceiling < p.Max; i++ {
		ceiling *= 2
	}
	ceiling = min(ceiling, p.Max)
	h := fnv.New64a()
	h.Write([]byte(key))
	h.Write([]byte{byte(attempt), byte(attempt >> 8)})
	// Never zero: a zero timer would retry a failing channel in a tight loop.
	return time.Duration(h.Sum64()%uint64(ceiling)) + time.Millisecond
}

// withSummary sets the summary the Temporal UI shows for the activities started
// with the returned context.
func withSummary(ctx workflow.Context, summary string) workflow.Context {
	o := workflow.GetActivityOptions(ctx)
	o.Summary = summary
	return workflow.WithActivityOptions(ctx, o)
}

// sleep is workflow.Sleep with a summary the UI shows for the timer, saying why it
// waits ("Retry-After 20s from expedia").
func sleep(ctx workflow.Context, d time.Duration, summary string) {
	if d <= 0 {
		return
	}
	_ = workflow.NewTimerWithOptions(ctx, d, workflow.TimerOptions{Summary: summary}).Get(ctx, nil)
}

// readable is a wait as the UI summaries print it: to the millisecond under a
// minute, to the second above.
func readable(d time.Duration) string {
	if d < time.Minute {
		return d.Round(time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}

// statusText names the answer a wait follows: "429", or "no answer" (a timeout,
// a lost connection) when there was no status.
func statusText(status int) string {
	if status == 0 {
		return "no answer"
	}
	return fmt.Sprint(status)
}
