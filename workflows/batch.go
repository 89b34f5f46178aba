package workflows

import (
	"fmt"
	"slices"
	"sort"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/paritysync/paritysync/models"
)

// BatchSync prepares a batch and pushes its chunks through ChannelSync children,
// most urgent first and a bounded number at a time. It forwards pause and resume
// signals to the affected children, answers the status query, and returns the
// final counts.
func BatchSync(ctx workflow.Context, in models.BatchSyncInput) (models.BatchStatus, error) {
	b := &batchSync{in: in, paused: map[string]string{}}
	return b.run(ctx)
}

type batchSync struct {
	in      models.BatchSyncInput
	plan    models.BatchPlan
	next    int
	results []models.ChannelCounts
	paused  map[string]string
	running []runningChild
	// started marks the chunks started; every chunk before next is.
	started []bool
}

type runningChild struct {
	id      string
	channel string
	// lanes is the child's window: the pushes it keeps in flight.
	lanes int
	fut   workflow.ChildWorkflowFuture
}

func (b *batchSync) status() models.BatchStatus {
	st := models.BatchStatus{
		BatchID: b.in.BatchID, Mutations: b.plan.Mutations, Chunks: len(b.plan.Chunks),
		Channels: models.MergeCounts(b.plan.Decided, b.results), Running: len(b.running),
		Finished: len(b.results), Rejected: b.plan.Rejected,
	}
	for _, c := range b.plan.Chunks {
		if reason, ok := b.paused[c.Channel]; ok && reason != "" && !slices.Contains(st.Paused, c.Channel) {
			st.Paused = append(st.Paused, c.Channel)
		}
	}
	return st
}

func (b *batchSync) run(ctx workflow.Context) (models.BatchStatus, error) {
	log := workflow.GetLogger(ctx)
	if err := workflow.SetQueryHandler(ctx, models.QueryStatus, func() (models.BatchStatus, error) {
		return b.status(), nil
	}); err != nil {
		return models.BatchStatus{}, fmt.Errorf("status query: %w", err)
	}
	if c := b.in.Carry; c != nil {
		b.plan, b.next, b.results = c.Plan, c.Next, c.Results
		if c.Paused != nil {
			b.paused = c.Paused
		}
		b.started = make([]bool, len(b.plan.Chunks))
		for i := range b.next {
			b.started[i] = true
		}
		for _, i := range c.Started {
			b.started[i] = true
		}
	} else {
		// PrepareBatch runs to its end even when the batch is cancelled meanwhile:
		// what it stored is then closed as cancelled, so no update is left without
		// an outcome whenever the cancel came.
		dctx, _ := workflow.NewDisconnectedContext(ctx)
		actx := withSummary(withActivity(dctx, 10*time.Minute, models.PriorityDefault), b.prepareSummary())
		err := workflow.ExecuteActivity(actx, models.ActivityPrepareBatch, b.in).Get(dctx, &b.plan)
		if ctx.Err() != nil {
			return b.cancel(ctx)
		}
		if err != nil {
			return b.status(), fmt.Errorf("prepare batch %s: %w", b.in.BatchID, err)
		}
		// Urgent chunks first, whatever order the plan came in; stable keeps the
		// plan's order within a priority.
		sort.SliceStable(b.plan.Chunks, func(i, j int) bool { return b.plan.Chunks[i].Priority < b.plan.Chunks[j].Priority })
		b.started = make([]bool, len(b.plan.Chunks))
		log.Info("batch planned", "mutations", b.plan.Mutations, "chunks", len(b.plan.Chunks))
	}

	sel := workflow.NewSelector(ctx)
	pause := workflow.GetSignalChannel(ctx, models.SignalPauseChannel)
	resume := workflow.GetSignalChannel(ctx, models.SignalResumeChannel)
	sel.AddReceive(pause, func(c workflow.ReceiveChannel, _ bool) {
		var sig models.PauseSignal
		c.Receive(ctx, &sig)
		b.pause(ctx, sig)
	})
	sel.AddReceive(resume, func(c workflow.ReceiveChannel, _ bool) {
		var sig models.PauseSignal
		c.Receive(ctx, &sig)
		b.resume(ctx, sig)
	})

	// An operator's cancel (starter batch cancel) stops starting chunks and asks the
	// running ones to stop.
	cancelled := false
	sel.AddReceive(ctx.Done(), func(workflow.ReceiveChannel, bool) { cancelled = true })

	for !cancelled {
		long := historyFull(ctx)
		if !long {
			b.startDue(ctx, sel)
		}
		if len(b.running) == 0 {
			if b.next >= len(b.plan.Chunks) {
				break
			}
			if long {
				// Signals that came with the last child's result, and handlers still
				// running, land in this run's state before it is handed on.
				if err := workflow.Await(ctx, func() bool { return workflow.AllHandlersFinished(ctx) }); err != nil {
					return b.cancel(ctx)
				}
				b.drain(ctx, pause, resume)
				log.Info("continuing as new", "next", b.next)
				next := b.in
				next.Mutations, next.PayloadKey = nil, ""
				next.Carry = &models.BatchCarry{Plan: b.plan, Next: b.next, Results: b.results, Paused: b.paused}
				for i := b.next; i < len(b.started); i++ {
					if b.started[i] {
						next.Carry.Started = append(next.Carry.Started, i)
					}
				}
				return b.status(), workflow.NewContinueAsNewError(ctx, BatchSync, next)
			}
		}
		sel.Select(ctx)
	}
	if cancelled {
		return b.cancel(ctx)
	}
	for sel.HasPending() {
		sel.Select(ctx) // apply signals that arrived with the last result
	}
	// Every update has its outcome in the store: the payload and requests can go.
	rctx := withSummary(withActivity(ctx, time.Minute, models.PriorityDefault),
		"release the stored payload of batch "+b.in.BatchID+": every update has its outcome")
	if err := workflow.ExecuteActivity(rctx, models.ActivityReleaseBatch, b.in.BatchID).Get(ctx, nil); err != nil {
		// Prune drops them after their retention anyway.
		log.Warn("release batch", "error", err)
	}
	st := b.status()
	st.Done = true
	b.finish(ctx, "done", st)
	t := st.Totals()
	log.Info("batch done", "committed", t.Committed, "superseded", t.Superseded,
		"rejected", t.Rejected, "dead_lettered", t.DeadLettered)
	return st, nil
}

// startDue starts, in plan order (most urgent first), every chunk whose channel
// has room for it. A channel's chunks start in order, but one channel waiting
// for room does not hold back another's. O(chunks not started × (channels +
// running children)) per call, called once per child result: a 100,000-request
// batch has 1,000 chunks.
func (b *batchSync) startDue(ctx workflow.Context, sel workflow.Selector) {
	for i := b.next; i < len(b.plan.Chunks); i++ {
		if b.in.MaxRunningChildren > 0 && len(b.running) >= b.in.MaxRunningChildren {
			break
		}
		if b.started[i] {
			continue
		}
		c := b.plan.Chunks[i]
		lanes := b.room(c)
		if lanes == 0 {
			if b.budget(c.Channel) == 0 {
				break // sized by child count: strictly in plan order, as always
			}
			continue
		}
		b.start(ctx, sel, c, lanes)
		b.started[i] = true
	}
	for b.next < len(b.started) && b.started[b.next] {
		b.next++
	}
}

// room is the window chunk c would start with now, 0 when its channel (or the
// batch) has no room for another child. A channel the plan sized gets pushes in
// flight up to its budget, the child taking what is free (its requests at most);
// one it did not runs DefaultMaxRunningChildren children of DefaultWindow lanes.
// An input's MaxRunningChildren and Window, when set, override both.
func (b *batchSync) room(c models.Chunk) int {
	if b.in.MaxRunningChildren > 0 && len(b.running) >= b.in.MaxRunningChildren {
		return 0
	}
	budget := b.budget(c.Channel)
	if budget == 0 {
		if b.in.MaxRunningChildren <= 0 && len(b.running) >= DefaultMaxRunningChildren {
			return 0
		}
		if b.in.Window > 0 {
			return b.in.Window
		}
		return DefaultWindow
	}
	used := 0
	for _, r := range b.running {
		if r.channel == c.Channel {
			used += r.lanes
		}
	}
	if used >= budget {
		return 0
	}
	if b.in.Window > 0 {
		return b.in.Window
	}
	return max(1, min(budget-used, c.Requests))
}

// budget is the pushes in flight the plan allows on channel, 0 when it does not say.
func (b *batchSync) budget(channel string) int {
	for _, f := range b.plan.InFlight {
		if f.Channel == channel {
			return f.InFlight
		}
	}
	return 0
}

// start launches the ChannelSync child for chunk c with the given window and wires
// its result into sel.
func (b *batchSync) start(ctx workflow.Context, sel workflow.Selector, c models.Chunk, lanes int) {
	id := models.ChannelSyncWorkflowID(b.in.BatchID, c.Channel, c.Priority, c.N)
	cctx := workflow.WithChildOptions(ctx, workflow.ChildWorkflowOptions{
		WorkflowID:            id,
		TaskQueue:             workflow.GetInfo(ctx).TaskQueueName,
		ParentClosePolicy:     enumspb.PARENT_CLOSE_POLICY_TERMINATE,
		WorkflowIDReusePolicy: enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE_FAILED_ONLY,
		// A cancelled batch waits for its children to stop before it closes the
		// outcomes, so nothing is sent after them.
		WaitForCancellation: true,
		Priority:            temporal.Priority{PriorityKey: c.Priority},
		TypedSearchAttributes: temporal.NewSearchAttributes(
			attrChannel.ValueSet(c.Channel), attrBatchID.ValueSet(b.in.BatchID), attrPriority.ValueSet(int64(c.Priority))),
		StaticSummary: fmt.Sprintf("%s, priority %d, chunk %d: %d requests, %d updates", c.Channel, c.Priority, c.N,
			c.Requests, c.Updates),
		StaticDetails: fmt.Sprintf("Pushes chunk %d of batch %s to %s at priority %d (%d requests carrying %d updates), "+
			"at most %d at a time, each through the shared rate budget.", c.N, b.in.BatchID, c.Channel, c.Priority,
			c.Requests, c.Updates, max(lanes, 1)),
	})
	window := b.in.Window // a child sized by count keeps its input as it always had
	if b.budget(c.Channel) > 0 {
		window = lanes
	}
	in := models.ChannelSyncInput{BatchID: b.in.BatchID, Chunk: c, Window: window, Retry: b.in.Retry,
		Paused: b.paused[c.Channel], Counts: models.ChannelCounts{Channel: c.Channel, Total: c.Updates}, PacedLanes: true}
	fut := workflow.ExecuteChildWorkflow(cctx, ChannelSync, in)
	b.running = append(b.running, runningChild{id: id, channel: c.Channel, lanes: lanes, fut: fut})
	sel.AddFuture(fut, func(f workflow.Future) {
		var counts models.ChannelCounts
		if err := f.Get(ctx, &counts); err != nil {
			// A child that failed outright (terminated, say) took what it knew with
			// it: park its whole chunk so reconciliation replays it. Replaying what
			// was committed is harmless; losing an update is not.
			workflow.GetLogger(ctx).Error("channel sync failed", "child", id, "error", err)
			counts = b.parkChunk(ctx, c, err)
		}
		counts.Total = 0 // the plan already counts the chunk's updates
		b.results = append(b.results, counts)
		b.remove(id)
	})
}

// cancel ends a batch the operator cancelled: it waits for the running children
// to stop (each lets its in-flight push finish and record its outcome), then gives
// every update still without an outcome the outcome cancelled, and ends the batch as
// cancelled with the counts as stored.
func (b *batchSync) cancel(ctx workflow.Context) (models.BatchStatus, error) {
	log := workflow.GetLogger(ctx)
	dctx, _ := workflow.NewDisconnectedContext(ctx)
	for _, r := range b.running {
		_ = r.fut.Get(dctx, nil) // cancelled, or finished meanwhile
	}
	b.running = nil
	var counts []models.ChannelCounts
	actx := withSummary(withActivity(dctx, time.Minute, models.PriorityUrgent),
		"close batch "+b.in.BatchID+": cancelled for every update still waiting")
	if err := workflow.ExecuteActivity(actx, models.ActivityCancelBatch, models.CancelInput{BatchID: b.in.BatchID,
		Reason: "batch cancelled by operator"}).Get(dctx, &counts); err != nil {
		log.Error("close a cancelled batch's outcomes", "error", err)
	} else {
		// The store's counts replace the plan's: they include what the children
		// recorded before they stopped.
		b.plan.Decided, b.results = counts, nil
	}
	st := b.status()
	st.Done, st.Cancelled = true, true
	b.finish(dctx, "cancelled", st)
	t := st.Totals()
	log.Info("batch cancelled", "committed", t.Committed, "cancelled", t.Cancelled, "total", t.Total)
	return st, temporal.NewCanceledError(st)
}

// parkChunk dead-letters every request of chunk c.
func (b *batchSync) parkChunk(ctx workflow.Context, c models.Chunk, cause error) models.ChannelCounts {
	counts := models.ChannelCounts{Channel: c.Channel}
	actx := withSummary(withActivity(ctx, 30*time.Second, c.Priority),
		fmt.Sprintf("dead-letter chunk %d of %s: its child failed", c.N, c.Channel))
	var res models.DeadLetterResult
	err := workflow.ExecuteActivity(actx, models.ActivityRecordDeadLetter, models.DeadLetterInput{
		BatchID: b.in.BatchID, ChunkKey: c.Key, Index: models.WholeChunk,
		Reason: models.ReasonChildFailed, Message: cause.Error(),
	}).Get(ctx, &res)
	if err != nil {
		workflow.GetLogger(ctx).Error("park chunk", "chunk", c.Key, "error", err)
		return counts
	}
	counts.DeadLettered = res.Updates
	return counts
}

func (b *batchSync) remove(id string) {
	for i, r := range b.running {
		if r.id == id {
			b.running = append(b.running[:i], b.running[i+1:]...)
			return
		}
	}
}

// pause records an operator's pause of a channel and passes it to its running children.
func (b *batchSync) pause(ctx workflow.Context, sig models.PauseSignal) {
	if sig.Reason == "" {
		sig.Reason = "paused by operator"
	}
	b.paused[sig.Channel] = sig.Reason
	b.forward(ctx, models.SignalPauseChannel, sig)
}

// resume ends an operator's pause of a channel, here and in its running children.
func (b *batchSync) resume(ctx workflow.Context, sig models.PauseSignal) {
	delete(b.paused, sig.Channel)
	b.forward(ctx, models.SignalResumeChannel, sig)
}

// drain applies every signal still waiting in its channel, so a continuation does
// not lose one. Resumes go before pauses: of a pause and a resume that arrived
// together, whose order the two channels no longer tell, the continuation keeps
// the pause, the safe side (an operator resumes again; a push sent while paused
// cannot be taken back).
func (b *batchSync) drain(ctx workflow.Context, pause, resume workflow.ReceiveChannel) {
	for {
		var sig models.PauseSignal
		switch {
		case resume.ReceiveAsync(&sig):
			b.resume(ctx, sig)
		case pause.ReceiveAsync(&sig):
			b.pause(ctx, sig)
		default:
			return
		}
	}
}

// forward sends a pause or resume signal to the running children of its channel.
func (b *batchSync) forward(ctx workflow.Context, name string, sig models.PauseSignal) {
	for _, r := range b.running {
		if r.channel != sig.Channel {
			continue
		}
		// A child may finish before the signal lands; that is fine.
		_ = workflow.SignalExternalWorkflow(ctx, r.id, "", name, sig).Get(ctx, nil)
	}
}

// prepareSummary is PrepareBatch's summary in the UI.
func (b *batchSync) prepareSummary() string {
	if b.in.PayloadKey != "" {
		return "prepare batch " + b.in.BatchID + " (stored): validate, record desired state, coalesce, chunk"
	}
	return fmt.Sprintf("prepare batch %s: validate %d mutations, record desired state, coalesce, chunk",
		b.in.BatchID, len(b.in.Mutations))
}

// versionFinishBatch gates FinishBatch: histories recorded before it replay
// without the activity.
const versionFinishBatch = "finish-batch"

// finish records how the batch ended in the store, queueing its completion
// callback when it names one; a failure is logged, never the batch's.
func (b *batchSync) finish(ctx workflow.Context, state string, st models.BatchStatus) {
	if workflow.GetVersion(ctx, versionFinishBatch, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		return
	}
	actx := withActivity(ctx, time.Minute, models.PriorityDefault)
	in := models.BatchFinished{BatchID: b.in.BatchID, State: state, EndedAt: workflow.Now(ctx), Channels: st.Channels,
		CallbackURL: b.in.CallbackURL}
	if err := workflow.ExecuteActivity(actx, models.ActivityFinishBatch, in).Get(ctx, nil); err != nil {
		workflow.GetLogger(ctx).Error("record the batch's end", "error", err)
	}
}
