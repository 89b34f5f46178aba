// Package ops is paritysync's service layer: the operations as a PMS or an
// operator performs them, over Temporal, the limiter and the store. Start, follow,
// read and cancel a batch (a dry run of one too, with channel "*" fanned out);
// read its outcomes; hand changes to a channel's smoother; pause and resume a
// channel and read its quota; list, export, acknowledge and replay dead letters.
// The starter (the command line) and intake (the HTTP API) both call these; each
// keeps only its own parsing and presentation.
package ops

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strings"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/paritysync/paritysync/activities/store"
	"github.com/paritysync/paritysync/models"
	"github.com/paritysync/paritysync/workflows"
)

// MemoContent is the memo field holding the SHA-256 of a batch's mutations, so a
// second start of the same id can tell the same batch from another one.
const MemoContent = "content_sha256"

// ContentDigest is the SHA-256 of ms as JSON.
func ContentDigest(ms []models.Mutation) (string, error) {
	body, err := json.Marshal(ms)
	if err != nil {
		return "", fmt.Errorf("encode batch: %w", err)
	}
	sum := sha256.Sum256(body)
	return hex.EncodeToString(sum[:]), nil
}

// TenantPattern is what a tenant name may be: it starts every batch id of the
// tenant (<tenant>.<id>), so it must not hold the separator '.' or anything a URL
// would escape.
var TenantPattern = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,31}$`)

// BatchIDTime is the layout of the time in a batch id made of one (UTC).
const BatchIDTime = "20060102-150405"

// TimedBatchID is a batch id made of the time and a random suffix after prefix:
// <prefix><yyyymmdd-hhmmss>-<random>.
func TimedBatchID(prefix string, now time.Time, random string) string {
	return prefix + now.UTC().Format(BatchIDTime) + "-" + random
}

// ErrBatchExists is wrapped by a ConflictError.
var ErrBatchExists = errors.New("batch id in use")

// ConflictError refuses a start whose id is taken: by other content, or by a batch
// that already ended (SameContent says whether its mutations were these).
type ConflictError struct {
	WorkflowID  string
	Running     bool
	SameContent bool
	// State is the Temporal state of the existing run, in lower case ("completed").
	State string
}

func (e *ConflictError) Error() string {
	if e.Running {
		return e.WorkflowID + " is running with other content (its payload is untouched)"
	}
	return fmt.Sprintf("%s already ran (%s)", e.WorkflowID, e.State)
}

func (e *ConflictError) Unwrap() error { return ErrBatchExists }

// ExistingBatch looks wfID up before anything is stored. It returns nil when the id
// is free; attach = true when a running batch has the same content (the caller
// follows it instead of starting, and stores nothing); a *ConflictError otherwise.
func ExistingBatch(ctx context.Context, tc client.Client, wfID, digest string) (attach bool, err error) {
	desc, err := tc.DescribeWorkflowExecution(ctx, wfID, "")
	var notFound *serviceerror.NotFound
	if errors.As(err, &notFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("look up %s: %w", wfID, err)
	}
	info := desc.GetWorkflowExecutionInfo()
	var theirs string
	if f := info.GetMemo().GetFields()[MemoContent]; f != nil {
		_ = json.Unmarshal(f.GetData(), &theirs)
	}
	status := info.GetStatus()
	running := status == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING
	if running && theirs == digest {
		return true, nil
	}
	return false, &ConflictError{WorkflowID: wfID, Running: running, SameContent: theirs == digest,
		State: strings.ToLower(strings.TrimPrefix(status.String(), "WORKFLOW_EXECUTION_STATUS_"))}
}

// BatchSaver keeps a big batch's mutations (the claim check); *store.Store is one.
type BatchSaver interface {
	SaveBatch(ctx context.Context, batchID string, ms []models.Mutation) (string, error)
}

// Batch is a batch to start.
type Batch struct {
	ID        string
	Mutations []models.Mutation
	// ResendSalt marks a deliberate re-send (a dead-letter replay).
	ResendSalt string
	// Digest tells this batch's content from another's under the same id; empty
	// means ContentDigest(Mutations). The HTTP API passes the body's own digest.
	Digest string
	// CallbackURL receives the batch's completion event (checked by the caller
	// against the tenant's allow-list).
	CallbackURL string
}

// Started is a started (or attached) batch.
type Started struct {
	BatchID    string
	WorkflowID string
	// Attached is set when the same batch was already running: nothing was started
	// and nothing stored.
	Attached bool
	Run      client.WorkflowRun
}

// StartBatch starts BatchSync for b. An id in use is looked at before anything is
// stored: the same content running is attached to, anything else refused with a
// *ConflictError, and no payload is overwritten. Big batches travel by reference
// (saver holds them); small ones inline.
func StartBatch(ctx context.Context, tc client.Client, queue string, saver BatchSaver, b Batch) (Started, error) {
	wfID := models.BatchWorkflowID(b.ID)
	out := Started{BatchID: b.ID, WorkflowID: wfID}
	digest := b.Digest
	if digest == "" {
		var err error
		if digest, err = ContentDigest(b.Mutations); err != nil {
			return out, err
		}
	}
	attach, err := ExistingBatch(ctx, tc, wfID, digest)
	if err != nil {
		return out, err
	}
	if attach {
		out.Attached, out.Run = true, tc.GetWorkflow(ctx, wfID, "")
		return out, nil
	}
	in := models.BatchSyncInput{BatchID: b.ID, Retry: models.DefaultRetryPolicy(), ResendSalt: b.ResendSalt,
		CallbackURL: b.CallbackURL}
	// Inline only while small in count and in bytes: a workflow input over
	// Temporal's payload limit would fail its start.
	if len(b.Mutations) > models.MaxInlineMutations || encodedSize(b.Mutations) > models.MaxUpdateBytes {
		if in.PayloadKey, err = saver.SaveBatch(ctx, b.ID, b.Mutations); err != nil {
			return out, err
		}
	} else {
		in.Mutations = b.Mutations
	}
	run, err := tc.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID: wfID, TaskQueue: queue,
		// A finished id is never run again under the same id, and a running one is
		// never joined by a second start.
		WorkflowIDReusePolicy:    enumspb.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE,
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_FAIL,
		Memo:                     map[string]any{MemoContent: digest},
		TypedSearchAttributes: temporal.NewSearchAttributes(
			temporal.NewSearchAttributeKeyKeyword(models.SearchAttrBatchID).ValueSet(b.ID)),
	}, workflows.BatchSync, in)
	var already *serviceerror.WorkflowExecutionAlreadyStarted
	if errors.As(err, &already) {
		// Another start of the same id won the race since the look-up: decide again.
		if attach, err = ExistingBatch(ctx, tc, wfID, digest); err != nil {
			return out, err
		}
		out.Attached, out.Run = attach, tc.GetWorkflow(ctx, wfID, "")
		return out, nil
	}
	if err != nil {
		return out, fmt.Errorf("start batch %s: %w", b.ID, err)
	}
	out.Run = run
	return out, nil
}

// Batch states as BatchState reports them.
const (
	StateRunning    = "running"
	StateDone       = "done"
	StateCancelled  = "cancelled"
	StateTerminated = "terminated"
	StateFailed     = "failed"
	StateTimedOut   = "timed_out"
)

var states = map[enumspb.WorkflowExecutionStatus]string{
	enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING:          StateRunning,
	enumspb.WORKFLOW_EXECUTION_STATUS_CONTINUED_AS_NEW: StateRunning,
	enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED:        StateDone,
	enumspb.WORKFLOW_EXECUTION_STATUS_CANCELED:         StateCancelled,
	enumspb.WORKFLOW_EXECUTION_STATUS_TERMINATED:       StateTerminated,
	enumspb.WORKFLOW_EXECUTION_STATUS_FAILED:           StateFailed,
	enumspb.WORKFLOW_EXECUTION_STATUS_TIMED_OUT:        StateTimedOut,
}

// ErrNoBatch is a batch id Temporal does not know.
var ErrNoBatch = errors.New("no such batch")

// BatchReport is a batch as the system of record and Temporal see it.
type BatchReport struct {
	BatchID    string
	WorkflowID string
	// State is Temporal's view: running, done, cancelled, terminated, failed, timed_out.
	State string
	// Started is when Temporal started the batch: its average rate runs from there.
	Started time.Time
	// Final is the batch's result once it is done (from its history: no worker
	// needed), with its requests, deferrals and listed rejections; nil otherwise.
	Final *models.BatchStatus
	// Counts are the batch's updates per channel as the store holds them (Total as
	// planned, the outcomes recorded so far); the store answers even when no worker
	// does. Planned is set once PrepareBatch recorded the totals.
	Counts  []models.ChannelCounts
	Planned bool
}

// BatchState reports a batch truthfully: its state from Temporal's description,
// its progress from the store, and its result once done. It sends Temporal no
// query, so it answers the same with or without a worker, and costs one describe.
func BatchState(ctx context.Context, tc client.Client, st *store.Store, batchID string) (BatchReport, error) {
	wfID := models.BatchWorkflowID(batchID)
	r := BatchReport{BatchID: batchID, WorkflowID: wfID}
	state, started, err := describeBatch(ctx, tc, batchID)
	if err != nil {
		return r, err
	}
	r.State, r.Started = state, started
	if r.State == StateDone {
		// The result is in the history: no worker needed.
		var final models.BatchStatus
		if err := tc.GetWorkflow(ctx, wfID, "").Get(ctx, &final); err == nil {
			r.Final = &final
		}
	}
	p, err := st.BatchProgress(ctx, batchID)
	if err != nil {
		return r, err
	}
	r.Counts, r.Planned = p.Channels, p.Planned
	return r, nil
}

// BatchProgress is a batch's status in counts: per channel (never nil, so JSON
// lists none as []), their totals, and each channel's progress at the average rate
// since the batch started.
type BatchProgress struct {
	Channels []models.ChannelCounts
	Totals   models.ChannelCounts
	Progress []ChannelProgress
}

// ProgressAt is counts (the report's Counts, or ResultCounts of them) summed up,
// with their rates from the batch's start to now.
func (r BatchReport) ProgressAt(counts []models.ChannelCounts, now time.Time) BatchProgress {
	if counts == nil {
		counts = []models.ChannelCounts{}
	}
	return BatchProgress{Channels: counts, Totals: models.BatchStatus{Channels: counts}.Totals(),
		Progress: Rates(counts, nil, now.Sub(r.Started))}
}

// DescribeBatch is a batch's state and start time as Temporal describes it: one
// describe, no query; ErrNoBatch when Temporal does not know the batch.
func DescribeBatch(ctx context.Context, tc client.Client, batchID string) (string, time.Time, error) {
	return describeBatch(ctx, tc, batchID)
}

// describeBatch is a batch's state and start time as Temporal describes it.
func describeBatch(ctx context.Context, tc client.Client, batchID string) (string, time.Time, error) {
	wfID := models.BatchWorkflowID(batchID)
	desc, err := tc.DescribeWorkflowExecution(ctx, wfID, "")
	var notFound *serviceerror.NotFound
	if errors.As(err, &notFound) {
		return "", time.Time{}, fmt.Errorf("batch %s: %w", batchID, ErrNoBatch)
	}
	if err != nil {
		return "", time.Time{}, fmt.Errorf("look up %s: %w", wfID, err)
	}
	info := desc.GetWorkflowExecutionInfo()
	return states[info.GetStatus()], info.GetStartTime().AsTime(), nil
}

// ResultCounts is the one counting rule of a batch's status and of a followed
// batch's summary. Every outcome is the store's (the system of record; a rejected
// mutation counts once, in Rejected and in Total), and Total is every update of the
// channel as PrepareBatch recorded it (never fewer than the outcomes recorded).
// Once the batch is done, its result (final) adds its deferrals and requests, which
// only the workflow counts, and its own totals where they are larger.
func ResultCounts(stored []models.ChannelCounts, final *models.BatchStatus) []models.ChannelCounts {
	out := append([]models.ChannelCounts(nil), stored...)
	if final == nil {
		return models.MergeCounts(out)
	}
	for _, l := range final.Channels {
		i := slices.IndexFunc(out, func(c models.ChannelCounts) bool { return c.Channel == l.Channel })
		if i < 0 {
			i = len(out)
			out = append(out, models.ChannelCounts{Channel: l.Channel})
		}
		out[i].Total = max(out[i].Total, l.Total)
		out[i].Deferred, out[i].Requests = l.Deferred, l.Requests
	}
	return models.MergeCounts(out)
}

// RunningBatch is a running BatchSync as Temporal's visibility lists it.
type RunningBatch struct {
	BatchID    string
	WorkflowID string
	Started    time.Time
}

// WorkflowLister lists workflows by a visibility query; client.Client is one.
type WorkflowLister interface {
	ListWorkflow(ctx context.Context, request *workflowservice.ListWorkflowExecutionsRequest) (*workflowservice.ListWorkflowExecutionsResponse, error)
}

// RunningBatches lists the running batches, oldest first, from visibility (no
// query): a page a call.
func RunningBatches(ctx context.Context, tc WorkflowLister) ([]RunningBatch, error) {
	var out []RunningBatch
	var token []byte
	for {
		resp, err := tc.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{
			Query: "WorkflowType = 'BatchSync' AND ExecutionStatus = 'Running'", NextPageToken: token,
		})
		if err != nil {
			return out, fmt.Errorf("list running batches: %w", err)
		}
		for _, e := range resp.GetExecutions() {
			if e.GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
				continue
			}
			id := e.GetExecution().GetWorkflowId()
			out = append(out, RunningBatch{BatchID: strings.TrimPrefix(id, models.BatchWorkflowID("")), WorkflowID: id,
				Started: e.GetStartTime().AsTime()})
		}
		if token = resp.GetNextPageToken(); len(token) == 0 {
			break
		}
	}
	slices.SortFunc(out, func(a, b RunningBatch) int { return a.Started.Compare(b.Started) })
	return out, nil
}

// Cancelled is what RequestCancel did.
type Cancelled struct {
	// Was is the batch's state before: running (now cancelled), or the state it had
	// already ended in.
	Was string
	// Closed counts updates RequestCancel closed itself, for a batch that had ended
	// without closing its outcomes (terminated, failed, timed out).
	Closed int
}

// RequestCancel asks a running batch to cancel and returns without waiting for
// it to close its outcomes (a big batch takes a while). For a batch that ended
// without closing them (terminated from the UI, say), it cancels what still waits
// itself; reconciliation re-sends those cells. A batch that already ended normally
// is left as it is.
func RequestCancel(ctx context.Context, tc client.Client, st *store.Store, batchID string) (Cancelled, error) {
	wfID := models.BatchWorkflowID(batchID)
	desc, err := tc.DescribeWorkflowExecution(ctx, wfID, "")
	var notFound *serviceerror.NotFound
	if errors.As(err, &notFound) {
		return Cancelled{}, fmt.Errorf("batch %s: %w", batchID, ErrNoBatch)
	}
	if err != nil {
		return Cancelled{}, fmt.Errorf("look up %s: %w", wfID, err)
	}
	status := desc.GetWorkflowExecutionInfo().GetStatus()
	c := Cancelled{Was: states[status]}
	switch status {
	case enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING:
	case enumspb.WORKFLOW_EXECUTION_STATUS_TERMINATED, enumspb.WORKFLOW_EXECUTION_STATUS_FAILED,
		enumspb.WORKFLOW_EXECUTION_STATUS_TIMED_OUT:
		if c.Closed, err = st.CancelPending(ctx, batchID, "batch ended without an outcome for it"); err != nil {
			return c, err
		}
		// The listing reads how it ended from the store: no FinishBatch ran.
		return c, st.FinishBatch(ctx, batchID, c.Was, nil)
	default:
		return c, nil
	}
	if err := tc.CancelWorkflow(ctx, wfID, ""); err != nil {
		return c, fmt.Errorf("cancel %s: %w", wfID, err)
	}
	return c, nil
}

// AwaitCancelled waits until a batch asked to cancel has ended, with every update
// closed. It returns ctx's error when ctx ends first; the cancel goes on.
func AwaitCancelled(ctx context.Context, tc client.Client, batchID string) error {
	wfID := models.BatchWorkflowID(batchID)
	var final models.BatchStatus
	err := tc.GetWorkflow(ctx, wfID, "").Get(ctx, &final)
	var canceled *temporal.CanceledError
	var deadline *serviceerror.DeadlineExceeded
	if err != nil && !errors.As(err, &canceled) {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if errors.As(err, &deadline) {
			// The call's own deadline (ctx's, carried by gRPC) can end it a moment
			// before ctx says so.
			return context.DeadlineExceeded
		}
		return fmt.Errorf("batch %s: %w", wfID, err)
	}
	return nil
}

// encodedSize is the bytes ms take as a workflow input (JSON, as the SDK's default
// converter writes it); ms that do not encode count as over any bound.
func encodedSize(ms []models.Mutation) int {
	b, err := json.Marshal(ms)
	if err != nil {
		return math.MaxInt
	}
	return len(b)
}
