package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"

	"github.com/paritysync/paritysync/models"
	"github.com/paritysync/paritysync/ops"
)

// Answers of a channel's submitter to one post's changes.
type submitVerdict int

const (
	submitTaken  submitVerdict = iota // in the smoother
	submitFull                        // the smoother has no room for them
	submitBusy                        // no answer within SubmitTimeout: they may still land
	submitFailed                      // any other error
)

// submitAnswer is what a submitter answers one post: for submitFull, the smoother's
// state the refusal is based on and the wait; for submitFailed, the error.
type submitAnswer struct {
	verdict submitVerdict
	status  models.SmootherStatus
	after   time.Duration
	err     error
}

// submitPost is one post's changes for one channel, waiting in a submitter.
type submitPost struct {
	ms     []models.Mutation
	size   int               // the changes' encoded bytes
	answer chan submitAnswer // buffered: the submitter never blocks on a post gone away
	// queued is true while the post waits for a group; guarded by submitter.mu.
	queued bool
}

// statusRefresh is the least time between two status queries of a submitter. A
// full smoother's refusals say "after the debounce" at the least, so a PMS that
// waits as told finds an estimate at most half that old; and a storm of posts to
// a full smoother costs the worker one query a second, not one per post (each
// query is a task the worker answers, as an update is).
const statusRefresh = models.DefaultDebounce / 2

// submitter is a channel's group commit into its burst smoother: every post's
// changes for the channel queue here, and one goroutine sends what queued while
// the previous update was in flight as one update, so the smoother's workflow
// handles one update per round instead of one per post. Admission stays per post:
// the submitter knows the smoother's room (the last answer's Pending, the status
// query when unknown) and refuses at once the posts that do not fit.
type submitter struct {
	channel  string
	smoother models.SmootherInput
	cfg      submitterConfig
	submit   func(ctx context.Context, ms []models.Mutation) (models.SubmitResult, error)
	status   func(ctx context.Context) (models.SmootherStatus, error)
	metrics  *serverMetrics

	mu      sync.Mutex
	queue   []*submitPost
	wake    chan struct{}
	est     models.SmootherStatus // the smoother's state as last learnt
	known   bool                  // est is worth deciding on
	queried time.Time             // when the status query was last sent
}

// submitterConfig is what every channel's submitter shares.
type submitterConfig struct {
	channel models.ChannelConfig
	// MaxGroup bounds the changes of one submit (at most the smoother's MaxBatch),
	// maxBytes their encoded bytes (0: models.MaxUpdateBytes), so one submit stages
	// a bounded write; the update itself carries only their reference.
	maxGroup int
	maxBytes int
	// Linger is how long an idle submitter waits for more posts before it sends.
	linger  time.Duration
	timeout time.Duration
}

// newSubmitter is channel smoother.Channel's submitter; its changes are staged in
// st (the smoother's claim check) and travel to the smoother by reference.
func newSubmitter(tc client.Client, st ops.ChangeStager, queue string, smoother models.SmootherInput, cfg submitterConfig, m *serverMetrics) *submitter {
	s := &submitter{channel: smoother.Channel, smoother: smoother, cfg: cfg, metrics: m, wake: make(chan struct{}, 1)}
	s.submit = func(ctx context.Context, ms []models.Mutation) (models.SubmitResult, error) {
		return ops.Submit(ctx, tc, queue, st, smoother, ms)
	}
	s.status = func(ctx context.Context) (models.SmootherStatus, error) {
		return ops.SmootherStatus(ctx, tc, smoother.Channel)
	}
	return s
}

// hand queues a post's changes and waits for the answer, at most until ctx ends;
// a post still queued then is withdrawn (never sent) and answered busy.
func (s *submitter) hand(ctx context.Context, ms []models.Mutation) submitAnswer {
	p := &submitPost{ms: ms, size: encodedSize(ms), answer: make(chan submitAnswer, 1), queued: true}
	if p.size > s.maxBytes() {
		// Valid changes never get here (models.MaxUpdateBytes holds a full group
		// of the largest); this keeps anything else out of the workflow.
		return submitAnswer{verdict: submitFailed,
			err: fmt.Errorf("%d changes of %d bytes exceed the %d bytes of one update", len(ms), p.size, s.maxBytes())}
	}
	s.mu.Lock()
	s.queue = append(s.queue, p)
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
	select {
	case a := <-p.answer:
		return a
	case <-ctx.Done():
	}
	s.mu.Lock()
	if p.queued {
		p.queued = false
		for i, q := range s.queue {
			if q == p {
				s.queue = append(s.queue[:i], s.queue[i+1:]...)
				break
			}
		}
	}
	s.mu.Unlock()
	select {
	case a := <-p.answer: // answered meanwhile
		return a
	default:
		return submitAnswer{verdict: submitBusy}
	}
}

// run sends groups until ctx ends, then answers every post still queued busy.
func (s *submitter) run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			s.mu.Lock()
			for _, p := range s.queue {
				p.queued = false
				p.answer <- submitAnswer{verdict: submitBusy}
			}
			s.queue = nil
			s.mu.Unlock()
			return
		case <-s.wake:
		}
		if s.cfg.linger > 0 {
			select {
			case <-ctx.Done():
				continue
			case <-time.After(s.cfg.linger):
			}
		}
		for ctx.Err() == nil && s.round(ctx) {
		}
	}
}

// round sends one group out of the queue and answers its posts; it reports
// whether posts are left for another round.
func (s *submitter) round(ctx context.Context) bool {
	s.refresh(ctx)
	group, n := s.gather()
	if len(group) > 0 {
		s.send(ctx, group, n)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.queue) > 0
}

// refresh asks the smoother for its state when the estimate is unknown, or when
// it says a queued post does not fit; at most every statusRefresh.
func (s *submitter) refresh(ctx context.Context) {
	s.mu.Lock()
	need := time.Since(s.queried) >= statusRefresh
	if need && s.known {
		need = false
		for _, p := range s.queue {
			if !s.fits(0, len(p.ms)) {
				need = true
				break
			}
		}
	}
	if need {
		s.queried = time.Now()
	}
	s.mu.Unlock()
	if need {
		s.learn(ctx)
	}
}

// learn asks the smoother for its state; without an answer the estimate stays
// as it was, and the smoother's own check keeps admission exact.
func (s *submitter) learn(ctx context.Context) {
	// A query waits for a workflow task: bounded, so a busy worker costs the
	// estimate, not the answer.
	qctx, cancel := context.WithTimeout(ctx, min(2*time.Second, s.cfg.timeout))
	st, err := s.status(qctx)
	cancel()
	var notFound *serviceerror.NotFound
	switch {
	case err == nil:
	case errors.As(err, &notFound):
		// Not started yet: the first update starts it with intake's limit.
		st = models.SmootherStatus{Channel: s.channel, MaxPending: s.smoother.MaxPending}
	default:
		return
	}
	if st.MaxPending <= 0 {
		st.MaxPending = s.smoother.MaxPending
	}
	s.mu.Lock()
	s.est, s.known = st, true
	s.mu.Unlock()
}

// fits reports whether n more changes fit in the smoother beside taken ones
// already in the group; an unknown state lets the smoother decide. s.mu is held.
func (s *submitter) fits(taken, n int) bool {
	return !s.known || s.est.Pending+taken+n <= s.est.MaxPending
}

// gather takes posts in arrival order into one group while the group stays within
// maxGroup; a post that does not fit the smoother's room is refused at once. It
// returns the group and its number of changes.
func (s *submitter) gather() ([]*submitPost, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var group []*submitPost
	n, size, rest := 0, 0, len(s.queue)
	for i, p := range s.queue {
		if len(group) > 0 && (n+len(p.ms) > s.cfg.maxGroup || size+p.size > s.maxBytes()) {
			rest = i // the next round's, in the same order
			break
		}
		p.queued = false
		if !s.fits(n, len(p.ms)) {
			p.answer <- s.full(len(p.ms))
			continue
		}
		group, n, size = append(group, p), n+len(p.ms), size+p.size
	}
	left := copy(s.queue, s.queue[rest:])
	clear(s.queue[left:])
	s.queue = s.queue[:left]
	return group, n
}

// maxBytes is the bound of one update's encoded changes.
func (s *submitter) maxBytes() int {
	if s.cfg.maxBytes > 0 {
		return s.cfg.maxBytes
	}
	return models.MaxUpdateBytes
}

// encodedSize is the bytes ms take in a workflow payload (JSON, as the SDK's
// default converter writes it); a mutation that does not encode counts as over
// any bound.
func encodedSize(ms []models.Mutation) int {
	n := 0
	for _, m := range ms {
		b, err := json.Marshal(m)
		if err != nil {
			return math.MaxInt
		}
		n += len(b) + 1
	}
	return n
}

// full is the refusal of n changes by the estimate. s.mu is held.
func (s *submitter) full(n int) submitAnswer {
	return submitAnswer{verdict: submitFull, status: s.est, after: ops.SmootherRetryAfter(s.cfg.channel, s.est, n)}
}

// send submits the group's n changes as one update and answers each of its posts.
func (s *submitter) send(ctx context.Context, group []*submitPost, n int) {
	ms := make([]models.Mutation, 0, n)
	for _, p := range group {
		ms = append(ms, p.ms...)
	}
	s.metrics.groupSize.WithLabelValues(s.channel).Observe(float64(n))
	s.metrics.groupPosts.WithLabelValues(s.channel).Observe(float64(len(group)))
	sctx, cancel := context.WithTimeout(ctx, s.cfg.timeout)
	res, err := s.submit(sctx, ms)
	// Our deadline, or the server giving up on the update under load.
	var waited *client.WorkflowUpdateServiceTimeoutOrCanceledError
	busy := sctx.Err() != nil || errors.As(err, &waited)
	cancel()
	answer := func(a submitAnswer) {
		for _, p := range group {
			p.answer <- a
		}
	}
	if !busy && ops.IsSmootherFull(err) {
		// The estimate was stale (another writer, a smoother started with another
		// limit, or none yet): the refusal says how full it is now.
		s.mu.Lock()
		s.known, s.est = true, models.SmootherStatus{Channel: s.channel,
			Pending: s.smoother.MaxPending, MaxPending: s.smoother.MaxPending}
		s.queried = time.Now()
		s.mu.Unlock()
		s.learn(ctx)
		s.mu.Lock()
		for _, p := range group {
			p.answer <- s.full(len(p.ms))
		}
		s.mu.Unlock()
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case busy:
		s.known = false // the update may or may not have landed
		answer(submitAnswer{verdict: submitBusy})
	case err != nil:
		s.known = false
		answer(submitAnswer{verdict: submitFailed, err: err})
	default:
		s.est.Pending = res.Pending
		answer(submitAnswer{verdict: submitTaken})
	}
}
