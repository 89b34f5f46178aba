package workflows

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/paritysync/paritysync/models"
)

// ChannelStatus answers ChannelSync's status query.
type ChannelStatus struct {
	Counts    models.ChannelCounts `json:"counts"`
	Remaining int                  `json:"remaining"`
	Paused    string               `json:"paused,omitempty"`
}

// ChannelSync pushes one stored chunk of requests to one channel, a few at a time,
// waiting out throttling with durable timers and dead-lettering what cannot be
// delivered. It returns the chunk's counts.
func ChannelSync(ctx workflow.Context, in models.ChannelSyncInput) (models.ChannelCounts, error) {
	s := &channelSync{in: in, retry: withDefaults(in.Retry), counts: in.Counts, paused: in.Paused}
	s.counts.Channel = in.Chunk.Channel
	return s.run(ctx)
}

type channelSync struct {
	in      models.ChannelSyncInput
	retry   models.RetryPolicy
	counts  models.ChannelCounts
	paused  string
	queue   []int
	busy    int
	stopped bool
	// resumes counts resume signals, so a lane waiting out a limiter pause wakes on one.
	resumes int
	// polling is set while one lane waits out a limiter pause; the others wait for it.
	polling bool
	// adaptive is set when the lanes follow the channel's pace (PacedLanes, an
	// input rather than a version marker, which would cost an action per run);
	// lanes counts the lanes still taking requests, at most window.
	adaptive bool
	lanes    int
	window   int
}

func (s *channelSync) run(ctx workflow.Context) (models.ChannelCounts, error) {
	log := workflow.GetLogger(ctx)
	if err := workflow.SetQueryHandler(ctx, models.QueryStatus, func() (ChannelStatus, error) {
		return ChannelStatus{Counts: s.counts, Remaining: len(s.queue) + s.busy, Paused: s.paused}, nil
	}); err != nil {
		return s.counts, fmt.Errorf("status query: %w", err)
	}
	s.listen(ctx)

	s.queue = s.in.Remaining
	if s.queue == nil {
		for i := range s.in.Chunk.Requests {
			s.queue = append(s.queue, i)
		}
	}
	window := s.in.Window
	if window <= 0 {
		window = DefaultWindow
	}
	actx := withActivity(ctx, models.PushActivityTimeout, s.in.Chunk.Priority)
	lanes := min(window, len(s.queue))
	s.adaptive = s.in.PacedLanes
	s.window = window
	first := s.reserveFirst(ctx, actx, lanes)
	for range lanes {
		s.startLane(ctx, actx, first)
	}
	if err := workflow.Await(ctx, func() bool { return s.busy == 0 }); err != nil {
		// Cancelled: let the lanes' in-flight pushes finish and record their outcomes.
		dctx, _ := workflow.NewDisconnectedContext(ctx)
		_ = workflow.Await(dctx, func() bool { return s.busy == 0 })
		return s.counts, err
	}
	if len(s.queue) > 0 {
		// A pause or resume that came with the last push's result is in this run's
		// state before the state is handed on.
		if err := workflow.Await(ctx, func() bool { return workflow.AllHandlersFinished(ctx) }); err != nil {
			return s.counts, err
		}
		s.drain(ctx)
		log.Info("continuing as new", "remaining", len(s.queue))
		next := s.in
		next.Remaining, next.Counts, next.Paused = s.queue, s.counts, s.paused
		return s.counts, workflow.NewContinueAsNewError(ctx, ChannelSync, next)
	}
	return s.counts, nil
}

// listen applies pause and resume signals; a pause takes effect before the next request.
func (s *channelSync) listen(ctx workflow.Context) {
	pause := workflow.GetSignalChannel(ctx, models.SignalPauseChannel)
	resume := workflow.GetSignalChannel(ctx, models.SignalResumeChannel)
	workflow.Go(ctx, func(ctx workflow.Context) {
		for {
			var sig models.PauseSignal
			sel := workflow.NewSelector(ctx)
			sel.AddReceive(pause, func(c workflow.ReceiveChannel, _ bool) {
				c.Receive(ctx, &sig)
				s.pause(sig)
			})
			sel.AddReceive(resume, func(c workflow.ReceiveChannel, _ bool) {
				c.Receive(ctx, &sig)
				s.resume()
			})
			sel.Select(ctx)
		}
	})
}

func (s *channelSync) pause(sig models.PauseSignal) {
	s.paused = sig.Reason
	if s.paused == "" {
		s.paused = "paused by operator"
	}
}

func (s *channelSync) resume() {
	s.paused = ""
	s.resumes++
}

// drain applies the pause and resume signals still waiting in their channels, so a
// continuation does not lose one; resumes first, so that of a pause and a resume
// that arrived together the pause, the safe side, is what the next run keeps.
func (s *channelSync) drain(ctx workflow.Context) {
	pause := workflow.GetSignalChannel(ctx, models.SignalPauseChannel)
	resume := workflow.GetSignalChannel(ctx, models.SignalResumeChannel)
	for {
		var sig models.PauseSignal
		switch {
		case resume.ReceiveAsync(&sig):
			s.resume()
		case pause.ReceiveAsync(&sig):
			s.pause(sig)
		default:
			return
		}
	}
}

// take hands out the next request index, or false when the chunk is done or the
// run's history is long enough to continue as new.
func (s *channelSync) take(ctx workflow.Context) (int, bool) {
	if ctx.Err() != nil {
		// The batch was cancelled: the parent closes what is left.
		return 0, false
	}
	if historyFull(ctx) {
		s.stopped = true
	}
	if s.stopped || len(s.queue) == 0 {
		return 0, false
	}
	i := s.queue[0]
	s.queue = s.queue[1:]
	return i, true
}

// startLane starts one more lane.
func (s *channelSync) startLane(ctx, actx workflow.Context, first map[int]models.Slot) {
	s.busy++
	s.lanes++
	workflow.Go(ctx, func(ctx workflow.Context) {
		defer func() { s.busy-- }()
		s.lane(ctx, actx, first)
	})
}

// lane pushes requests one after another. Each push also reserves the slot of the
// lane's next request, so a request costs one push and at most one durable timer.
//
// On adaptive runs the lanes follow the channel's pace. A lane whose slot is
// further away than the short wait (it needs a timer) pushes that request without
// holding another and ends, as long as another lane goes on; a lane whose next slot
// is due within a quarter of the short wait starts another lane, up to the window.
// On a saturated channel the lanes left are about as many as have slots within the
// short wait, which the push waits out in process: a request costs one push.
func (s *channelSync) lane(ctx, actx workflow.Context, first map[int]models.Slot) {
	counted := true
	defer func() {
		if counted {
			s.lanes--
		}
	}()
	i, ok := s.take(ctx)
	var slot *models.Slot
	if f, held := first[i]; ok && held {
		slot = &f
	}
	// ahead are the requests the lane took after i, in order: the next one, and on
	// adaptive runs whose slots come within the short wait a few more, which the
	// push of i may deliver in the same attempt (PushInput.Then).
	var ahead []int
	// The first request of a lane keeps the layout ReserveSlots held the lanes'
	// first slots in; a lane decides whether to go on once its pushes hold slots.
	for started := true; ok; started = false {
		if s.adaptive && !started && len(ahead) == 0 && s.lanes > 1 && slot != nil && slot.Wait > s.shortWait() {
			// Enough lanes hold slots ahead of this one: this is its last request.
			s.lanes--
			counted = false
		} else if len(ahead) == 0 {
			if next, more := s.take(ctx); more {
				ahead = append(ahead, next)
			}
		}
		if s.adaptive && !started && len(ahead) > 0 && (slot == nil || slot.Wait <= s.shortWait()) {
			for len(ahead) < 1+MaxChained {
				next, more := s.take(ctx)
				if !more {
					break
				}
				ahead = append(ahead, next)
			}
		}
		var pushed int
		var done bool
		slot, pushed, done = s.deliver(ctx, actx, i, slot, ahead)
		if !done {
			// The run's history is full while i still waits: i and what the lane
			// took after it go back to the queue for the next run, their held slots
			// kept under their reservation ids.
			s.queue = append(append(slices.Clone(ahead), i), s.queue...)
			s.stopped = true
			return
		}
		ahead = ahead[pushed:]
		if s.stopped {
			// The run continues as new: what the lane took goes back to the queue;
			// a held slot survives in the limiter under the same reservation id.
			s.queue = append(slices.Clone(ahead), s.queue...)
			return
		}
		if len(ahead) == 0 {
			if !counted {
				return // the lane retired
			}
			// The push delivered all the lane took: on with the queue.
			i, ok = s.take(ctx)
			slot = nil
			continue
		}
		i, ahead = ahead[0], ahead[1:]
		if slot != nil && slot.Index != i {
			slot = nil
		}
		if s.adaptive && slot != nil && slot.Wait < s.shortWait()/4 && s.lanes < s.window &&
			len(s.queue) > 0 {
			// The next slot is due at once: the channel has room for another lane.
			s.startLane(ctx, actx, nil)
		}
	}
}

// MaxChained is how many requests after the next one a lane hands a push to deliver
// in the same attempt when their slots come within the short wait.
const MaxChained = 3

// reserveFirst holds, in one activity, the slots of the requests the lanes start
// with: the first of every lane's pair, in the order the lanes take them.
func (s *channelSync) reserveFirst(ctx, actx workflow.Context, lanes int) map[int]models.Slot {
	if lanes < 2 {
		return nil
	}
	wfID := workflow.GetInfo(ctx).WorkflowExecution.ID
	in := models.ReserveSlotsInput{ChunkKey: s.in.Chunk.Key}
	for l := range lanes {
		// Lane l takes queue[2l] and holds queue[2l+1] as its next.
		if k := 2 * l; k < len(s.queue) {
			in.Indexes = append(in.Indexes, s.queue[k])
			in.Reservations = append(in.Reservations, models.ReservationID(wfID, s.queue[k]))
		}
	}
	var slots []models.Slot
	rctx := withSummary(actx, fmt.Sprintf("reserve the first slots of %d lanes to %s", lanes, s.in.Chunk.Channel))
	if err := workflow.ExecuteActivity(rctx, models.ActivityReserveSlots, in).Get(ctx, &slots); err != nil {
		// Not fatal: each lane then asks for itself with its first push.
		workflow.GetLogger(ctx).Warn("reserve first slots", "error", err)
		return nil
	}
	out := make(map[int]models.Slot, len(slots))
	for _, sl := range slots {
		out[sl.Index] = sl
	}
	return out
}

// deliver pushes request i until it has an outcome, after waiting for its held slot
// if the previous push reserved one, and returns the slot reserved for next. It
// returns done = false, without an outcome, when the run's history fills up while i
// waits, so that the run can continue as new.
func (s *channelSync) deliver(ctx, actx workflow.Context, i int, slot *models.Slot, ahead []int) (*models.Slot, int, bool) {
	log := workflow.GetLogger(ctx)
	wfID := workflow.GetInfo(ctx).WorkflowExecution.ID
	key := fmt.Sprintf("%s/%d", wfID, i)
	in := models.PushInput{BatchID: s.in.BatchID, ChunkKey: s.in.Chunk.Key, Index: i,
		Reservation: models.ReservationID(wfID, i)}
	if len(ahead) > 0 {
		in.Next, in.NextReservation = ahead[0], models.ReservationID(wfID, ahead[0])
	}
	for _, k := range ahead[min(1, len(ahead)):] {
		in.Then = append(in.Then, k)
		in.ThenReservations = append(in.ThenReservations, models.ReservationID(wfID, k))
	}
	// about describes request i once an activity read it (a held slot's, or a
	// previous attempt's answer): the summary of its pushes in the UI.
	about := ""
	if slot != nil {
		about = slot.About
		if slot.Wait > s.shortWait() {
			s.sleepToSlot(ctx, slot.Wait)
		}
	}
	channel := s.in.Chunk.Channel
	transient, deferrals, quotaWaits := 0, 0, 0
	for attempt := 0; ; attempt++ {
		if attempt > 0 && historyFull(ctx) {
			return nil, 0, false
		}
		if s.paused != "" {
			log.Info("paused", "request", i, "reason", s.paused)
			_ = workflow.Await(ctx, func() bool { return s.paused == "" })
		}
		var res models.PushResult
		pctx := workflow.WithHeartbeatTimeout(withSummary(actx, s.pushSummary(about, i)), models.PushHeartbeatTimeout)
		err := workflow.ExecuteActivity(pctx, models.ActivityPushRequest, in).Get(ctx, &res)
		if err == nil && res.About != "" {
			about = res.About
		}
		if err == nil && res.Deferred != nil {
			// Waiting for budget is normal operation and never counts toward the
			// request's dead-letter budget.
			s.counts.Deferred++
			s.waitDeferred(ctx, *res.Deferred)
			continue
		}
		if err == nil {
			s.record(ctx, i, res)
			pushed := min(len(res.Chained), len(ahead))
			for k := range pushed {
				s.record(ctx, ahead[k], res.Chained[k])
			}
			return res.Next, pushed, true
		}
		if temporal.IsCanceledError(err) || ctx.Err() != nil {
			return nil, 0, true // cancelled with the batch, which closes the outcome
		}
		var appErr *temporal.ApplicationError
		if !errors.As(err, &appErr) {
			// Cancellation or an activity that ran out of infrastructure retries:
			// park it so nothing is lost silently.
			s.deadLetter(ctx, i, nil, models.ReasonRetryExhausted, 0, err.Error())
			return nil, 0, true
		}
		var f models.Failure
		_ = appErr.Details(&f)
		switch appErr.Type() {
		case models.ErrRateLimited:
			// As a deferred result (histories recorded before it was one, and the
			// rare waits that still fail: a lost gate, a call late for its slot).
			s.counts.Deferred++
			s.waitDeferred(ctx, models.Deferral{Wait: models.Duration(f.Wait), Held: f.Held, Paused: f.Paused,
				Tier: f.Tier, Reason: f.Message})
		case models.ErrThrottled:
			s.counts.Deferred++
			deferrals++
			if deferrals > s.retry.MaxDeferrals {
				s.deadLetter(ctx, i, nil, models.ReasonRetryExhausted, f.Status, "throttled too often: "+f.Message)
				return nil, 0, true
			}
			wait := f.Wait
			if !f.ServerWait {
				// A 429 or 503 without a usable Retry-After: back off as for a 5xx.
				wait = Backoff(s.retry, key, deferrals)
			}
			wait = min(wait, s.retry.MaxWait)
			sleep(ctx, wait, throttleSummary(channel, f, wait))
		case models.ErrTransient:
			transient++
			if transient >= s.retry.Attempts {
				s.deadLetter(ctx, i, nil, models.ReasonRetryExhausted, f.Status, f.Message)
				return nil, 0, true
			}
			wait := Backoff(s.retry, key, transient)
			sleep(ctx, wait, transientSummary(channel, f, wait, transient+1, s.retry.Attempts))
		case models.ErrAuthExpired:
			if in.RefreshCredential {
				s.deadLetter(ctx, i, nil, models.ReasonAuth, f.Status, "credential refused after refresh")
				return nil, 0, true
			}
			in.RefreshCredential = true
		case models.ErrPayloadLost:
			s.deadLetter(ctx, i, nil, models.ReasonPayloadLost, 0, f.Message)
			return nil, 0, true
		case models.ErrQuotaExhausted:
			// The day's quota is spent — the channel's (the limiter holds every
			// worker off the channel until it resets) or only this request's family
			// (the channel answered quota_exhausted: the limiter stops that family
			// until the reset, its other families go on). The request waits for the
			// reset with one durable timer and goes again. A quota still spent after
			// MaxQuotaWaits resets is parked.
			s.counts.Deferred++
			quotaWaits++
			if quotaWaits > MaxQuotaWaits {
				s.deadLetter(ctx, i, nil, models.ReasonQuotaExhausted, f.Status, f.Message)
				return nil, 0, true
			}
			wait := max(f.Wait, time.Minute)
			sleep(ctx, wait, fmt.Sprintf("quota of %s spent: wait %s for the reset", channel, readable(wait)))
		default:
			s.deadLetter(ctx, i, nil, models.ReasonRejected, f.Status, f.Message)
			return nil, 0, true
		}
	}
}

// record counts the outcome of request i and parks the lines a channel refused.
func (s *channelSync) record(ctx workflow.Context, i int, res models.PushResult) {
	s.counts.Requests++
	s.counts.Committed += res.Committed
	s.counts.Superseded += res.Superseded
	if len(res.Failed) > 0 {
		lines := make([]int, len(res.Failed))
		for k, f := range res.Failed {
			lines[k] = f.Line
		}
		s.deadLetter(ctx, i, lines, models.ReasonLineFailed, 207, res.Failed[0].Code+": "+res.Failed[0].Message)
	}
}

// sleepToSlot waits for a held slot wait away, waking half the activity's short wait
// early: the push then starts before the slot and waits the rest in process, so the
// lateness of timers and task dispatch does not make the request late for its slot.
func (s *channelSync) sleepToSlot(ctx workflow.Context, wait time.Duration) {
	at := workflow.Now(ctx).Add(wait).UTC()
	sleep(ctx, max(time.Millisecond, wait-s.shortWait()/2), "wait for slot "+at.Format("15:04:05")+" UTC")
}

// waitDeferred waits out a push the limiter did not let go: a pause until a
// resume (or the poll), a held slot until it is due, a back-off or an open breaker
// for its wait.
func (s *channelSync) waitDeferred(ctx workflow.Context, d models.Deferral) {
	wait := time.Duration(d.Wait)
	switch {
	case d.Paused != "":
		s.waitPause(ctx, wait, d.Paused)
	case d.Held:
		s.sleepToSlot(ctx, min(wait, s.retry.MaxWait))
	default:
		wait = min(wait, s.retry.MaxWait)
		sleep(ctx, wait, deferralSummary(s.in.Chunk.Channel, d, wait))
	}
}

// throttleSummary is the UI summary of the wait after channel answered 429 or 503:
// its Retry-After, or our back-off when it gave none.
func throttleSummary(channel string, f models.Failure, wait time.Duration) string {
	if f.ServerWait {
		return fmt.Sprintf("Retry-After %s from %s", readable(wait), channel)
	}
	return fmt.Sprintf("back-off %s after %s from %s", readable(wait), statusText(f.Status), channel)
}

// transientSummary is the UI summary of the wait before attempt of attempts after a
// 5xx or no answer.
func transientSummary(channel string, f models.Failure, wait time.Duration, attempt, attempts int) string {
	return fmt.Sprintf("retry %d/%d in %s after %s from %s", attempt, attempts, readable(wait), statusText(f.Status), channel)
}

// deferralSummary is the UI summary of the timer that waits out deferral d of a
// push to channel: a back-off the limiter holds after a 429 elsewhere, or the
// named reason ("circuit breaker open").
func deferralSummary(channel string, d models.Deferral, wait time.Duration) string {
	if d.Reason != "" {
		return fmt.Sprintf("%s on %s: ask again in %s", d.Reason, channel, readable(wait))
	}
	return fmt.Sprintf("%s backing off: ask again in %s", channel, readable(wait))
}

// pushSummary is the UI summary of a push of request i: what it carries once an
// activity read it, else where it is stored.
func (s *channelSync) pushSummary(about string, i int) string {
	if about != "" {
		return about
	}
	return fmt.Sprintf("push request %d of %d to %s", i+1, s.in.Chunk.Requests, s.in.Chunk.Channel)
}

// MaxQuotaWaits is how many quota resets a request waits for before it is parked.
const MaxQuotaWaits = 2

// shortWait is the longest held-slot wait the activity spends in process; a lane
// starts the push at once for such a slot instead of setting a timer.
func (s *channelSync) shortWait() time.Duration { return models.DefaultShortWait }

// waitPause waits out a limiter pause that no signal announced: until a resume signal
// or poll, whichever comes first. One lane polls; the others wait for it, so a pause
// of hours costs a few events, not one per lane every few seconds.
func (s *channelSync) waitPause(ctx workflow.Context, poll time.Duration, reason string) {
	if s.polling {
		_ = workflow.Await(ctx, func() bool { return !s.polling })
		return
	}
	s.polling = true
	seen := s.resumes
	_, _ = workflow.AwaitWithOptions(ctx, workflow.AwaitOptions{Timeout: poll,
		TimerOptions: workflow.TimerOptions{Summary: "paused: " + reason}}, func() bool { return s.resumes > seen })
	s.polling = false
}

// deadLetter parks request i (or some of its lines) and counts the parked updates.
func (s *channelSync) deadLetter(ctx workflow.Context, i int, lines []int, reason string, status int, msg string) {
	dctx := withSummary(withActivity(ctx, 30*time.Second, s.in.Chunk.Priority),
		fmt.Sprintf("dead-letter request %d of %s: %s", i+1, s.in.Chunk.Channel, reason))
	var res models.DeadLetterResult
	err := workflow.ExecuteActivity(dctx, models.ActivityRecordDeadLetter, models.DeadLetterInput{
		BatchID: s.in.BatchID, ChunkKey: s.in.Chunk.Key, Index: i, Lines: lines,
		Reason: reason, Status: status, Message: msg,
	}).Get(ctx, &res)
	if err != nil {
		workflow.GetLogger(ctx).Error("dead-letter", "request", i, "error", err)
		return
	}
	s.counts.DeadLettered += res.Updates
}
