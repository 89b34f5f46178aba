package main

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/paritysync/paritysync/models"
)

// fakeSmoother stands in for a smoother: it records the updates it gets and holds
// each until released.
type fakeSmoother struct {
	mu      sync.Mutex
	updates [][]string
	release chan struct{}
}

func (f *fakeSmoother) submitter(t *testing.T, timeout time.Duration) *submitter {
	t.Helper()
	s := &submitter{channel: "agoda", smoother: models.SmootherInput{Channel: "agoda", MaxPending: 100},
		cfg: submitterConfig{maxGroup: 500, timeout: timeout}, metrics: newServerMetrics(prometheus.NewRegistry()),
		wake: make(chan struct{}, 1)}
	s.status = func(context.Context) (models.SmootherStatus, error) {
		return models.SmootherStatus{Channel: "agoda", MaxPending: 100}, nil
	}
	s.submit = func(ctx context.Context, ms []models.Mutation) (models.SubmitResult, error) {
		var ids []string
		for _, m := range ms {
			ids = append(ids, m.ID)
		}
		f.mu.Lock()
		f.updates = append(f.updates, ids)
		f.mu.Unlock()
		select {
		case <-f.release: // one update per token
			return models.SubmitResult{Accepted: len(ms), Pending: len(ms)}, nil
		case <-ctx.Done():
			return models.SubmitResult{}, ctx.Err()
		}
	}
	return s
}

// TestSubmitterWithdrawsAPostWhoseWaitEndsWhileQueued holds an update in flight
// while a second post waits in the queue past its deadline: that post is answered
// busy and its changes are never sent, and the first is taken once the update
// returns. Stopping the submitter answers busy the post in flight and the one
// still queued, without sending the latter.
func TestSubmitterWithdrawsAPostWhoseWaitEndsWhileQueued(t *testing.T) {
	f := &fakeSmoother{release: make(chan struct{})}
	s := f.submitter(t, time.Minute)
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.run(ctx); close(done) }()
	inFlight := func(n int) {
		require.Eventually(t, func() bool { f.mu.Lock(); defer f.mu.Unlock(); return len(f.updates) == n },
			5*time.Second, time.Millisecond, "update %d is in flight", n)
	}
	handAsync := func(id string) chan submitAnswer {
		a := make(chan submitAnswer, 1)
		go func() { a <- s.hand(context.Background(), []models.Mutation{{ID: id}}) }()
		return a
	}

	a := handAsync("a")
	inFlight(1)
	short, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	require.Equal(t, submitBusy, s.hand(short, []models.Mutation{{ID: "b"}}).verdict, "its wait ended while queued")
	f.release <- struct{}{}
	require.Equal(t, submitTaken, (<-a).verdict)

	d := handAsync("d")
	inFlight(2)
	e := handAsync("e")
	require.Eventually(t, func() bool { s.mu.Lock(); defer s.mu.Unlock(); return len(s.queue) == 1 },
		5*time.Second, time.Millisecond, "e is queued")
	stop()
	<-done
	require.Equal(t, submitBusy, (<-d).verdict, "the update in flight was given up")
	require.Equal(t, submitBusy, (<-e).verdict, "the queued post is answered on stop")
	f.mu.Lock()
	defer f.mu.Unlock()
	require.Equal(t, [][]string{{"a"}, {"d"}}, f.updates, "neither the withdrawn post nor the one queued at stop was sent")
}

// TestSubmitterBoundsAGroupsBytes queues two posts behind an update in flight
// under a byte bound that holds one of them: they go in two updates, not one; a
// post over the bound alone is refused without being sent.
func TestSubmitterBoundsAGroupsBytes(t *testing.T) {
	f := &fakeSmoother{release: make(chan struct{})}
	s := f.submitter(t, time.Minute)
	one := []models.Mutation{{ID: "a"}}
	s.cfg.maxBytes = encodedSize(one) * 3 / 2
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	go s.run(ctx)
	answers := make(chan submitAnswer, 3)
	for _, id := range []string{"a", "b", "c"} {
		go func() { answers <- s.hand(context.Background(), []models.Mutation{{ID: id}}) }()
		if id == "a" {
			require.Eventually(t, func() bool { f.mu.Lock(); defer f.mu.Unlock(); return len(f.updates) == 1 },
				5*time.Second, time.Millisecond, "a is in flight")
		}
	}
	require.Eventually(t, func() bool { s.mu.Lock(); defer s.mu.Unlock(); return len(s.queue) == 2 },
		5*time.Second, time.Millisecond, "b and c are queued")
	for range 3 {
		f.release <- struct{}{}
		require.Equal(t, submitTaken, (<-answers).verdict)
	}
	f.mu.Lock()
	require.Len(t, f.updates, 3, "b and c do not fit one update's bytes: %v", f.updates)
	for _, u := range f.updates {
		require.Len(t, u, 1, "%v", f.updates)
	}
	f.mu.Unlock()
	big := s.hand(context.Background(), []models.Mutation{{ID: "d"}, {ID: "e"}})
	require.Equal(t, submitFailed, big.verdict)
	f.mu.Lock()
	defer f.mu.Unlock()
	require.Len(t, f.updates, 3, "the post over the bound was never sent")
}
