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
}

type runningChild struct {
	id      string
	channel string
	fut     workflow.ChildWorkflowFuture
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
	} else {
		// PrepareBatch runs to its end even when the batch is cancelled meanwhile:
		// what it stored is then closed as cancelled, so no update is left without
		// an outcome whenever the cancel came.
		dctx, _ := workflow.NewDisconnectedContext(ctx)
		actx := withActivity(dctx, 10*time.Minute, models.PriorityDefault)
		err := workflow.ExecuteActivity(actx, acts.PrepareBatch, b.in).Get(dctx, &b.plan)
		if ctx.Err() != nil {
			return b.cancel(ctx)
		}
		if err != nil {
			return b.status(), fmt.Errorf("prepare batch %s: %w", b.in.BatchID, err)
		}
		// Urgent chunks first, whatever order the plan came in; stable keeps the
		// plan's order within a priority.
		sort.SliceStable(b.plan.Chunks, func(i, j int) bool { return b.plan.Chunks[i].Priority < b.plan.Chunks[j].Priority })
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

	maxRunning := b.in.MaxRunningChildren
	if maxRunning <= 0 {
		maxRunning = DefaultMaxRunningChildren
	}
	for !cancelled {
		long := historyFull(ctx)
		for !long && len(b.running) < maxRunning && b.next < len(b.plan.Chunks) {
			b.start(ctx, sel, b.plan.Chunks[b.next])
			b.next++
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
	rctx := withActivity(ctx, time.Minute, models.PriorityDefault)
	if err := workflow.ExecuteActivity(rctx, acts.ReleaseBatch, b.in.BatchID).Get(ctx, nil); err != nil {
		// Prune drops them after their retention anyway.
		log.Warn("release batch", "error", err)
	}
	st := b.status()
	st.Done = true
	t := st.Totals()
	log.Info("batch done", "committed", t.Committed, "superseded", t.Superseded,
		"rejected", t.Rejected, "dead_lettered", t.DeadLettered)
	return st, nil
}

// start launches the ChannelSync child for chunk c and wires its result into sel.
func (b *batchSync) start(ctx workflow.Context, sel workflow.Selector, c models.Chunk) {
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
	})
	in := models.ChannelSyncInput{BatchID: b.in.BatchID, Chunk: c, Window: b.in.Window, Retry: b.in.Retry,
		Paused: b.paused[c.Channel], Counts: models.ChannelCounts{Channel: c.Channel, Total: c.Updates}}
	fut := workflow.ExecuteChildWorkflow(cctx, ChannelSync, in)
	b.running = append(b.running, runningChild{id: id, channel: c.Channel, fut: fut})
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
	actx := withActivity(dctx, time.Minute, models.PriorityUrgent)
	if err := workflow.ExecuteActivity(actx, acts.CancelBatch, models.CancelInput{BatchID: b.in.BatchID,
		Reason: "batch cancelled by operator"}).Get(dctx, &counts); err != nil {
		log.Error("close a cancelled batch's outcomes", "error", err)
	} else {
		// The store's counts replace the plan's: they include what the children
		// recorded before they stopped.
		b.plan.Decided, b.results = counts, nil
	}
	st := b.status()
	st.Done, st.Cancelled = true, true
	t := st.Totals()
	log.Info("batch cancelled", "committed", t.Committed, "cancelled", t.Cancelled, "total", t.Total)
	return st, temporal.NewCanceledError(st)
}

// parkChunk dead-letters every request of chunk c.
func (b *batchSync) parkChunk(ctx workflow.Context, c models.Chunk, cause error) models.ChannelCounts {
	counts := models.ChannelCounts{Channel: c.Channel}
	actx := withActivity(ctx, 30*time.Second, c.Priority)
	var res models.DeadLetterResult
	err := workflow.ExecuteActivity(actx, acts.RecordDeadLetter, models.DeadLetterInput{
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
