package models

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"
)

// TaskQueue is the Temporal task queue every paritysync worker polls.
const TaskQueue = "paritysync"

// Signal and query names of BatchSync and ChannelSync.
const (
	SignalPauseChannel  = "pause-channel"
	SignalResumeChannel = "resume-channel"
	QueryStatus         = "status"
)

// Search attributes paritysync sets so runs are findable in the UI.
const (
	SearchAttrChannel  = "Channel"
	SearchAttrBatchID  = "BatchID"
	SearchAttrPriority = "Priority"
)

// MaxInlineMutations is the most mutations a BatchSync input carries inline; larger
// batches travel by reference (a claim check in PostgreSQL).
const MaxInlineMutations = 500

// BatchWorkflowID is the workflow id of a batch.
func BatchWorkflowID(batchID string) string { return "batch/" + batchID }

// ChannelSyncWorkflowID is the workflow id of chunk n of a batch's requests to one
// channel at one priority.
func ChannelSyncWorkflowID(batchID, channel string, priority, n int) string {
	return fmt.Sprintf("batch/%s/%s/p%d/%d", batchID, channel, priority, n)
}

// WorkflowKeys are what a paritysync workflow id says about the work: the batch, the
// channel and the priority, each empty (0) where the id does not carry it.
type WorkflowKeys struct {
	Batch    string
	Channel  string
	Priority int
}

// KeysOf reads a workflow id built by BatchWorkflowID, ChannelSyncWorkflowID or
// SmootherWorkflowID; logs carry its keys so a batch or a channel can be followed
// across workflows and activities.
func KeysOf(workflowID string) WorkflowKeys {
	parts := strings.Split(workflowID, "/")
	var k WorkflowKeys
	switch {
	case parts[0] == "batch" && len(parts) >= 2:
		k.Batch = parts[1]
		if len(parts) == 5 && strings.HasPrefix(parts[3], "p") {
			k.Channel = parts[2]
			k.Priority, _ = strconv.Atoi(parts[3][1:])
		}
	case parts[0] == "smoother" && len(parts) == 2:
		k.Channel = parts[1]
	}
	return k
}

// RetryPolicy is how ChannelSync waits out failures with durable timers.
type RetryPolicy struct {
	// Initial, Max and Attempts shape the full-jitter exponential backoff after
	// 5xx answers and timeouts.
	Initial  time.Duration `json:"initial"`
	Max      time.Duration `json:"max"`
	Attempts int           `json:"attempts"`
	// MaxWait caps one wait for a denied token or a Retry-After.
	MaxWait time.Duration `json:"max_wait"`
	// MaxDeferrals bounds how often one request may be deferred by throttling
	// before it is dead-lettered.
	MaxDeferrals int `json:"max_deferrals"`
}

// DefaultRetryPolicy is 1 s doubling to 60 s over 5 attempts; throttle waits capped at 5 min.
func DefaultRetryPolicy() RetryPolicy {
	return RetryPolicy{Initial: time.Second, Max: time.Minute, Attempts: 5, MaxWait: 5 * time.Minute, MaxDeferrals: 200}
}

// BatchSyncInput starts a batch. Exactly one of Mutations and PayloadKey is set.
type BatchSyncInput struct {
	BatchID    string     `json:"batch_id"`
	Mutations  []Mutation `json:"mutations,omitempty"`
	PayloadKey string     `json:"payload_key,omitempty"`
	// MaxRunningChildren, when set, bounds the ChannelSync children running at
	// once; otherwise the plan's in-flight budgets do (BatchPlan.InFlight).
	MaxRunningChildren int `json:"max_running_children,omitempty"`
	// Window, when set, is how many requests each ChannelSync keeps in flight;
	// otherwise a child takes what its channel's in-flight budget leaves free.
	Window int         `json:"window,omitempty"`
	Retry  RetryPolicy `json:"retry"`
	// ResendSalt marks a deliberate re-send (reconciliation): it becomes every
	// request's KeySalt so the channel applies content it acknowledged before.
	ResendSalt string `json:"resend_salt,omitempty"`
	// Carry is the state handed to the next run on continue-as-new.
	Carry *BatchCarry `json:"carry,omitempty"`
	// CallbackURL, when set, receives one signed POST when the batch ends (the
	// tenant's allow-listed URL; never a secret: the signing key stays with intake).
	CallbackURL string `json:"callback_url,omitempty"`
}

// BatchFinished is FinishBatch's input: how a batch ended, with its counts.
type BatchFinished struct {
	BatchID string `json:"batch_id"`
	// State is done or cancelled.
	State       string          `json:"state"`
	EndedAt     time.Time       `json:"ended_at"`
	Channels    []ChannelCounts `json:"channels"`
	CallbackURL string          `json:"callback_url,omitempty"`
}

// BatchEndedEvent is the body of a batch's completion callback; EventID is the
// same on every delivery of it.
type BatchEndedEvent struct {
	EventID  string          `json:"event_id"`
	Type     string          `json:"type"`
	BatchID  string          `json:"batch_id"`
	State    string          `json:"state"`
	EndedAt  time.Time       `json:"ended_at"`
	Counts   ChannelCounts   `json:"counts"`
	Channels []ChannelCounts `json:"channels"`
}

// EventBatchEnded is BatchEndedEvent's type.
const EventBatchEnded = "batch.ended"

// BatchCarry is what a BatchSync run hands to its continuation.
type BatchCarry struct {
	Plan    BatchPlan         `json:"plan"`
	Next    int               `json:"next"`
	Results []ChannelCounts   `json:"results"`
	Paused  map[string]string `json:"paused,omitempty"`
	// Started lists the chunks from Next on that were started (and finished).
	Started []int `json:"started,omitempty"`
}

// Chunk is a stored slice of one channel's requests at one priority.
type Chunk struct {
	Channel  string `json:"channel"`
	Priority int    `json:"priority"`
	N        int    `json:"n"`
	Key      string `json:"key"`
	Requests int    `json:"requests"`
	Updates  int    `json:"updates"`
}

// BatchPlan is PrepareBatch's small answer: where the chunks are and what was
// already decided.
type BatchPlan struct {
	BatchID   string          `json:"batch_id"`
	Mutations int             `json:"mutations"`
	Chunks    []Chunk         `json:"chunks"`
	Decided   []ChannelCounts `json:"decided"`
	Rejected  []Rejection     `json:"rejected,omitempty"`
	// InFlight sizes, per channel, the pushes the batch keeps in flight
	// (PlanInFlight); a channel missing from it runs DefaultMaxRunningChildren
	// children of four lanes, as before the plan carried it.
	InFlight []ChannelInFlight `json:"in_flight,omitempty"`
}

// Rejection is an invalid mutation and every reason it is invalid.
type Rejection struct {
	MutationID string       `json:"mutation_id"`
	Channel    string       `json:"channel"`
	Problems   []FieldError `json:"problems"`
}

// ChannelCounts tallies one channel's updates (a mutation's part in one endpoint
// family) by outcome. Rejected counts whole mutations.
type ChannelCounts struct {
	Channel      string `json:"channel"`
	Total        int    `json:"total"`
	Committed    int    `json:"committed"`
	Superseded   int    `json:"superseded"`
	Rejected     int    `json:"rejected"`
	DeadLettered int    `json:"dead_lettered"`
	// Cancelled counts updates still waiting when the operator cancelled the batch.
	Cancelled int `json:"cancelled,omitempty"`
	// Deferred counts waits for a token or a Retry-After; it is not an outcome.
	Deferred int `json:"deferred"`
	Requests int `json:"requests"`
}

// Add adds o's tallies to c.
func (c *ChannelCounts) Add(o ChannelCounts) {
	c.Total += o.Total
	c.Committed += o.Committed
	c.Superseded += o.Superseded
	c.Rejected += o.Rejected
	c.DeadLettered += o.DeadLettered
	c.Cancelled += o.Cancelled
	c.Deferred += o.Deferred
	c.Requests += o.Requests
}

// Done is how many of c's updates have an outcome.
func (c ChannelCounts) Done() int {
	return c.Committed + c.Superseded + c.Rejected + c.DeadLettered + c.Cancelled
}

// MergeCounts sums counts per channel, sorted by channel. It ranges over no map, so
// workflow code may call it.
func MergeCounts(lists ...[]ChannelCounts) []ChannelCounts {
	index := map[string]int{}
	var out []ChannelCounts
	for _, l := range lists {
		for _, c := range l {
			i, ok := index[c.Channel]
			if !ok {
				i = len(out)
				index[c.Channel] = i
				out = append(out, ChannelCounts{Channel: c.Channel})
			}
			out[i].Add(c)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Channel < out[j].Channel })
	return out
}

// BatchStatus answers the status query and is BatchSync's result.
type BatchStatus struct {
	BatchID   string          `json:"batch_id"`
	Mutations int             `json:"mutations"`
	Channels  []ChannelCounts `json:"channels"`
	Chunks    int             `json:"chunks"`
	Running   int             `json:"running"`
	Finished  int             `json:"finished"`
	Paused    []string        `json:"paused,omitempty"`
	Rejected  []Rejection     `json:"rejected,omitempty"`
	Done      bool            `json:"done"`
	// Cancelled is set when the operator cancelled the batch.
	Cancelled bool `json:"cancelled,omitempty"`
}

// Totals sums the per-channel counts.
func (s BatchStatus) Totals() ChannelCounts {
	var t ChannelCounts
	for _, c := range s.Channels {
		t.Add(c)
	}
	t.Channel = "all"
	return t
}

// ChannelSyncInput is one chunk of requests to push to one channel.
type ChannelSyncInput struct {
	BatchID string      `json:"batch_id"`
	Chunk   Chunk       `json:"chunk"`
	Window  int         `json:"window"`
	Retry   RetryPolicy `json:"retry"`
	Paused  string      `json:"paused,omitempty"`
	// Remaining lists the request indexes still to push after a continue-as-new;
	// nil means all of them.
	Remaining []int         `json:"remaining,omitempty"`
	Counts    ChannelCounts `json:"counts"`
	// PacedLanes has the run's lanes follow the channel's pace (a lane whose slot
	// needs a timer ends while another goes on; a push delivers the lane's next
	// requests whose slots come within the short wait). BatchSync sets it; runs
	// started without it, before it existed, keep their lanes and replay as they ran.
	PacedLanes bool `json:"paced_lanes,omitempty"`
}

// PauseSignal is the payload of the pause-channel and resume-channel signals.
type PauseSignal struct {
	Channel string `json:"channel"`
	Reason  string `json:"reason,omitempty"`
}

// PushInput asks PushRequest to send request Index of a stored chunk.
type PushInput struct {
	BatchID  string `json:"batch_id"`
	ChunkKey string `json:"chunk_key"`
	Index    int    `json:"index"`
	// RefreshCredential asks for a new bearer token before sending (after a 401).
	RefreshCredential bool `json:"refresh_credential,omitempty"`
	// Reservation names the request's slot in the limiter; it is the same on every
	// attempt of the request (ReservationID).
	Reservation string `json:"reservation"`
	// Next, when NextReservation is set, is the request the lane sends after this
	// one: once this one has its outcome, PushRequest reserves Next's slot too, so
	// the lane waits with one timer per request and asks the limiter once.
	Next            int    `json:"next,omitempty"`
	NextReservation string `json:"next_reservation,omitempty"`
	// Then lists, under ThenReservations, the lane's requests after Next. When the
	// slot a push holds for the lane's next request is due within the short wait,
	// the same attempt pushes that request too, and so on down Then while the
	// attempt has time for another channel call (PushResult.Chained).
	Then             []int    `json:"then,omitempty"`
	ThenReservations []string `json:"then_reservations,omitempty"`
}

// ReserveSlotsInput asks ReserveSlots to hold the slots of requests Indexes of a
// stored chunk under the matching Reservations.
type ReserveSlotsInput struct {
	ChunkKey     string   `json:"chunk_key"`
	Indexes      []int    `json:"indexes"`
	Reservations []string `json:"reservations"`
}

// ReservationID is the limiter reservation of request i of a ChannelSync run; runs
// continued as new keep their workflow id, so a held slot survives them.
func ReservationID(workflowID string, i int) string { return fmt.Sprintf("%s/%d", workflowID, i) }

// Slot is a limiter slot held for a request: it may be sent Wait after the
// answer that carried the slot.
type Slot struct {
	Index int           `json:"index"`
	Wait  time.Duration `json:"wait"`
	// About describes the slot's request (ChannelRequest.Summary), so the push that
	// takes the slot carries it as its summary in the Temporal UI.
	About string `json:"about,omitempty"`
}

// PushResult is what a delivered request came to.
type PushResult struct {
	ConfirmationID string        `json:"confirmation_id"`
	Committed      int           `json:"committed"`
	Superseded     int           `json:"superseded"`
	Failed         []FailedLine  `json:"failed,omitempty"`
	FailedRefs     []MutationRef `json:"failed_refs,omitempty"`
	// Next is the slot reserved for PushInput.Next; nil when none was asked or the
	// limiter could not hold one (the lane then asks when it sends).
	Next *Slot `json:"next,omitempty"`
	// Deferred is set when nothing was sent: the limiter said wait. The workflow
	// waits (one durable timer) and pushes again.
	Deferred *Deferral `json:"deferred,omitempty"`
	// About describes the request (ChannelRequest.Summary), for the summaries of
	// its next attempts.
	About string `json:"about,omitempty"`
	// Chained are the outcomes of the requests the attempt pushed after this one
	// (PushInput.Next, then Then, in order). Next is then the slot held for the
	// first request it did not push; the lane pushes that one and the rest itself.
	Chained []PushResult `json:"chained,omitempty"`
}

// FailedLine is a line a channel refused in a partial success.
type FailedLine struct {
	Line    int    `json:"line"`
	Code    string `json:"code"`
	Message string `json:"message"`
}

// DeadLetterInput parks a request, or some of its lines, that cannot be delivered.
type DeadLetterInput struct {
	BatchID  string `json:"batch_id"`
	ChunkKey string `json:"chunk_key"`
	Index    int    `json:"index"`
	// Lines, when set, limits the entry to these line indexes (partial success).
	Lines   []int  `json:"lines,omitempty"`
	Reason  string `json:"reason"`
	Status  int    `json:"status,omitempty"`
	Message string `json:"message,omitempty"`
}

// DeadLetterResult says how many updates were parked.
type DeadLetterResult struct {
	Updates int    `json:"updates"`
	EntryID string `json:"entry_id"`
}

// CancelInput asks CancelBatch to close a cancelled batch's outcomes.
type CancelInput struct {
	BatchID string `json:"batch_id"`
	Reason  string `json:"reason,omitempty"`
}

// Dead-letter reasons.
const (
	ReasonRejected       = "rejected"
	ReasonAuth           = "auth"
	ReasonQuotaExhausted = "quota_exhausted"
	ReasonRetryExhausted = "retry_budget_exhausted"
	ReasonLineFailed     = "line_failed"
	ReasonChildFailed    = "channel_sync_failed"
	// ReasonPayloadLost: the batch's stored request is gone (released or past its
	// retention); its cells are left to reconciliation, which re-sends their desired
	// state.
	ReasonPayloadLost = "payload_lost"
)

// WholeChunk as a DeadLetterInput.Index parks every request of the chunk.
const WholeChunk = -1

// ReconcileWorkflowID is the workflow id of the reconciliation of one day.
func ReconcileWorkflowID(day Date) string { return "reconcile/" + day.String() }

// ReconcileInput asks for the channels' state to be read back and compared with
// the desired state for the next HorizonDays nights.
type ReconcileInput struct {
	Channels    []string `json:"channels"`
	HorizonDays int      `json:"horizon_days,omitempty"`
}

// DefaultReconcileHorizon is how many nights ahead reconciliation checks by default.
const DefaultReconcileHorizon = 30

// DiffInput asks DiffChannel to compare one channel with the desired state over
// [From, To] and to store what must be re-sent as batch BatchID.
type DiffInput struct {
	Channel string `json:"channel"`
	From    Date   `json:"from"`
	To      Date   `json:"to"`
	BatchID string `json:"batch_id"`
}

// ChannelDrift is what reconciliation found on one channel.
type ChannelDrift struct {
	Channel string `json:"channel"`
	// Checked counts cells (per family) with a desired state compared with the
	// channel, acknowledged or not.
	Checked int `json:"checked"`
	// Drifted counts cells whose channel values differ from the desired state.
	Drifted int `json:"drifted"`
	// Resent counts cells re-sent without a comparison, on a channel configured
	// without read-back (read_back: false, as OpenTravel must be).
	Resent int `json:"resent,omitempty"`
	// Unconfirmed counts cells whose channel holds the desired values without our
	// acknowledgement of that version (a lost answer): re-sent to be confirmed.
	Unconfirmed int `json:"unconfirmed"`
	// Reads counts read-backs, each paid with a limiter slot.
	Reads int `json:"reads"`
	// PayloadKey holds the repair mutations when Drifted, Unconfirmed or Resent > 0.
	PayloadKey string `json:"payload_key,omitempty"`
	// Repair is the repair batch's outcome.
	Repair *BatchStatus `json:"repair,omitempty"`
}

// ReconcileResult is Reconcile's answer.
type ReconcileResult struct {
	Day      Date           `json:"day"`
	Channels []ChannelDrift `json:"channels"`
}

// SmootherWorkflowID is the workflow id of a channel's burst smoother.
func SmootherWorkflowID(channel string) string { return "smoother/" + channel }

// UpdateSubmit is the update a PMS hands changes to a burst smoother with (a
// SubmitRef to changes staged in the claim check); the smoother answers at once
// whether it took them.
const UpdateSubmit = "submit"

// SmootherInput configures a channel's burst smoother; zero fields take defaults.
type SmootherInput struct {
	Channel string `json:"channel"`
	// Debounce is how long the smoother waits for the burst to end: it flushes
	// once no mutation arrived for this long, or when MaxBatch are waiting.
	Debounce time.Duration `json:"debounce,omitempty"`
	// MaxBatch is the most mutations one flushed batch carries (at most
	// MaxInlineMutations, so the batch travels inline).
	MaxBatch int `json:"max_batch,omitempty"`
	// MaxPending is the admission limit: a submit that would take the waiting
	// mutations past it is refused, and the PMS retries later.
	MaxPending int `json:"max_pending,omitempty"`
	// MaxHistory, when set, is the history length at which a run continues as new
	// (at most the workflows' MaxHistory).
	MaxHistory int `json:"max_history,omitempty"`
	// Waiting and Flushed carry the state across continue-as-new: the waiting
	// changes are in the claim check, the run holds only their counts.
	Waiting PriorityCounts `json:"waiting"`
	Flushed int            `json:"flushed,omitempty"`
}

// Smoother defaults. UrgentDebounce is the debounce of urgent work (priority 1),
// whatever Debounce says: a stop-sell waits this long for company, no longer.
const (
	DefaultDebounce   = 2 * time.Second
	UrgentDebounce    = 250 * time.Millisecond
	DefaultMaxPending = 5000
)

// ErrSmootherFull is the error type of a submit the smoother refused by admission
// control: too many mutations wait already; the caller submits again later.
const ErrSmootherFull = "SmootherFull"

// SubmitResult is the smoother's answer to a submit.
type SubmitResult struct {
	Accepted int `json:"accepted"`
	Pending  int `json:"pending"`
}

// SmootherStatus answers the smoother's status query.
type SmootherStatus struct {
	Channel string `json:"channel"`
	Pending int    `json:"pending"`
	// MaxPending is the admission limit this smoother was started with.
	MaxPending int `json:"max_pending,omitempty"`
	Flushed    int `json:"flushed"`
	// Running is how many flushed batches are still running.
	Running   int    `json:"running"`
	LastBatch string `json:"last_batch,omitempty"`
	// Totals sums the outcomes of the batches this run flushed.
	Totals ChannelCounts `json:"totals"`
}
