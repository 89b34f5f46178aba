package ops

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/paritysync/paritysync/limiter"
	"github.com/paritysync/paritysync/models"
	"github.com/paritysync/paritysync/workflows"
)

// ChangeStager keeps the changes of a submit (the smoother's claim check);
// *store.Store is one.
type ChangeStager interface {
	StageChanges(ctx context.Context, channel, submission string, ms []models.Mutation) error
	DropStaged(ctx context.Context, channel, submission string) error
}

// Submit hands ms to smoother.Channel's burst smoother, starting it with smoother
// (its debounce and admission limit) if it is not running; a running smoother
// keeps the settings it was started with. The changes are staged in st first and
// the update carries their reference (models.SubmitRef), so it stays small
// whatever they weigh. A refusal by admission control is an error for which
// IsSmootherFull is true. Whatever the smoother did not admit (refused, failed, no
// answer) is dropped from st; an update that lands after that admits nothing, and
// the caller was told to send again.
func Submit(ctx context.Context, tc client.Client, queue string, st ChangeStager, smoother models.SmootherInput, ms []models.Mutation) (models.SubmitResult, error) {
	channel := smoother.Channel
	var res models.SubmitResult
	sub, err := newSubmission()
	if err != nil {
		return res, err
	}
	if err := st.StageChanges(ctx, channel, sub, ms); err != nil {
		return res, err
	}
	start := tc.NewWithStartWorkflowOperation(client.StartWorkflowOptions{
		ID: models.SmootherWorkflowID(channel), TaskQueue: queue,
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
		TypedSearchAttributes: temporal.NewSearchAttributes(
			temporal.NewSearchAttributeKeyKeyword(models.SearchAttrChannel).ValueSet(channel)),
	}, workflows.BurstSmoother, smoother)
	h, err := tc.UpdateWithStartWorkflow(ctx, client.UpdateWithStartWorkflowOptions{
		StartWorkflowOperation: start,
		UpdateOptions: client.UpdateWorkflowOptions{
			// The submission names the update: a retried call is one update.
			UpdateID: sub, UpdateName: models.UpdateSubmit,
			Args:         []any{models.SubmitRef{Submission: sub, Changes: len(ms)}},
			WaitForStage: client.WorkflowUpdateStageCompleted,
		},
	})
	if err == nil {
		err = h.Get(ctx, &res)
	}
	if err != nil {
		// Only what was never admitted goes; the prune takes it otherwise.
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		_ = st.DropStaged(dctx, channel, sub)
		cancel()
	}
	return res, err
}

// newSubmission is a fresh submission id: 128 random bits.
func newSubmission() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("submission id: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

// IsSmootherFull reports whether err is a smoother's admission refusal.
func IsSmootherFull(err error) bool {
	var ae *temporal.ApplicationError
	return errors.As(err, &ae) && ae.Type() == models.ErrSmootherFull
}

// SmootherStatus asks channel's smoother for its status.
func SmootherStatus(ctx context.Context, tc client.Client, channel string) (models.SmootherStatus, error) {
	var st models.SmootherStatus
	v, err := tc.QueryWorkflow(ctx, models.SmootherWorkflowID(channel), "", models.QueryStatus)
	if err != nil {
		return st, fmt.Errorf("query %s: %w", models.SmootherWorkflowID(channel), err)
	}
	if err := v.Get(&st); err != nil {
		return st, fmt.Errorf("decode smoother status: %w", err)
	}
	return st, nil
}

// SmootherRetryAfter is how long a PMS should wait before submitting n mutations
// again to a smoother in state st: the debounce, plus the time the channel needs,
// at its declared pace and full requests, to drain what must leave before n fit
// under the smoother's admission limit. Coalescing only makes it shorter. It is at
// least a second and at most five minutes.
func SmootherRetryAfter(ch models.ChannelConfig, st models.SmootherStatus, n int) time.Duration {
	limit := st.MaxPending
	if limit <= 0 {
		limit = models.DefaultMaxPending
	}
	excess := max(st.Pending+n-limit, 0)
	perSecond := float64(max(ch.RatePerMinute, 1)) * float64(max(ch.MaxLinesPerRequest, 1)) / 60
	wait := models.DefaultDebounce + time.Duration(float64(excess)/perSecond*float64(time.Second))
	return min(max(wait.Round(time.Second), time.Second), 5*time.Minute)
}

// SetPause pauses (reason non-empty) or resumes channel in the shared limiter, so
// every worker and new batch waits, and signals every running BatchSync, which
// forwards it to its children. It returns how many batches were signalled;
// signal failures (a batch ending meanwhile) go to onSignalErr.
func SetPause(ctx context.Context, tc client.Client, lim *limiter.Limiter, channel string, pause bool, reason string,
	onSignalErr func(workflowID string, err error)) (int, error) {
	var err error
	if pause {
		err = lim.Pause(ctx, channel, reason)
	} else {
		err = lim.Resume(ctx, channel)
	}
	if err != nil {
		return 0, err
	}
	signal := models.SignalResumeChannel
	if pause {
		signal = models.SignalPauseChannel
	}
	running, err := RunningBatches(ctx, tc)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, b := range running {
		if err := tc.SignalWorkflow(ctx, b.WorkflowID, "", signal, models.PauseSignal{Channel: channel, Reason: reason}); err != nil {
			if onSignalErr != nil {
				onSignalErr(b.WorkflowID, err)
			}
			continue
		}
		n++
	}
	return n, nil
}

// QuotaRow is one channel's limiter state.
type QuotaRow struct {
	Channel         string       `json:"channel"`
	DailyUsed       int          `json:"daily_used"`
	DailyLimit      int          `json:"daily_limit"`
	UsedPercent     float64      `json:"used_percent"`
	Tier            limiter.Tier `json:"tier"`
	ResetsInSeconds float64      `json:"resets_in_seconds"`
	Paused          string       `json:"paused,omitempty"`
	BackoffSeconds  float64      `json:"backoff_seconds"`
	// WindowLimit is the limit in force (0 for a per-property channel); InWindow and
	// Ahead the slots of the current 60 s window and the held future ones; Foreign
	// what others use of the window, by the channel's rate-limit headers.
	WindowLimit int `json:"window_limit"`
	InWindow    int `json:"in_window"`
	Ahead       int `json:"reserved_ahead"`
	Foreign     int `json:"foreign,omitempty"`
	// Breaker is the circuit breaker's state; Failures the streak of 5xx answers
	// and timeouts that opens it.
	Breaker  string `json:"breaker"`
	Failures int    `json:"failures"`
	// Stopped are the families the channel stopped with quota_exhausted: nothing
	// of them goes until the stop ends, whatever the channel's tier.
	Stopped []FamilyStop `json:"stopped,omitempty"`
	// BackedOff is how many properties' windows a 429 backed off on a channel that
	// limits per property; PropertyBackoffs lists those that end last (at most
	// limiter.StatusBackoffs). The channel's other properties go on.
	BackedOff        int               `json:"backed_off_properties,omitempty"`
	PropertyBackoffs []PropertyBackoff `json:"property_backoffs,omitempty"`
}

// PropertyBackoff is one property's window backed off, until Until (UTC).
type PropertyBackoff struct {
	Property string `json:"property_id"`
	// Window is the endpoint family, or the endpoint it shares with others.
	Window     string    `json:"window"`
	ForSeconds float64   `json:"for_seconds"`
	Until      time.Time `json:"until"`
}

// FamilyStop is one family a channel stopped, until Until (UTC).
type FamilyStop struct {
	Family     models.Family `json:"family"`
	ForSeconds float64       `json:"for_seconds"`
	Until      time.Time     `json:"until"`
}

// Quota reads each channel's limiter state.
func Quota(ctx context.Context, lim *limiter.Limiter, channels []string) ([]QuotaRow, error) {
	rows := make([]QuotaRow, 0, len(channels))
	for _, slug := range channels {
		s, err := lim.Status(ctx, slug)
		if err != nil {
			return nil, err
		}
		r := QuotaRow{Channel: slug, DailyUsed: s.DailyUsed, DailyLimit: s.DailyLimit, Tier: s.Tier,
			ResetsInSeconds: s.QuotaResetsIn.Seconds(), Paused: s.PausedReason,
			BackoffSeconds: s.PausedFor.Seconds(), WindowLimit: s.Limit, InWindow: s.InWindow, Ahead: s.Ahead,
			Foreign: s.Foreign, Breaker: s.Breaker, Failures: s.Failures}
		for _, f := range s.Stopped {
			r.Stopped = append(r.Stopped, FamilyStop{Family: f.Family, ForSeconds: f.For.Seconds(),
				Until: time.Now().UTC().Add(f.For).Round(time.Second)})
		}
		r.BackedOff = s.BackedOff
		for _, b := range s.Backoffs {
			r.PropertyBackoffs = append(r.PropertyBackoffs, PropertyBackoff{Property: b.Property, Window: b.Window,
				ForSeconds: b.For.Seconds(), Until: time.Now().UTC().Add(b.For).Round(time.Millisecond)})
		}
		if s.DailyLimit > 0 {
			r.UsedPercent = math.Round(float64(s.DailyUsed)*1000/float64(s.DailyLimit)) / 10
		}
		rows = append(rows, r)
	}
	return rows, nil
}

// TierRank orders the quota tiers, ok lowest.
var TierRank = map[limiter.Tier]int{limiter.TierOK: 0, limiter.TierWarn: 1, limiter.TierPage: 2,
	limiter.TierThrottle: 3, limiter.TierStop: 4}

// WorstTier is the highest tier among rows; a stopped family counts as the stop.
func WorstTier(rows []QuotaRow) limiter.Tier {
	w := limiter.TierOK
	for _, r := range rows {
		t := r.Tier
		if len(r.Stopped) > 0 {
			t = limiter.TierStop
		}
		if TierRank[t] > TierRank[w] {
			w = t
		}
	}
	return w
}
