package ops

import (
	"context"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/paritysync/paritysync/activities/store"
	"github.com/paritysync/paritysync/models"
)

// ChannelProgress is one channel's updates done of its total, the rate they got
// their outcomes at and the time left at that rate.
type ChannelProgress struct {
	Channel string `json:"channel"`
	Done    int    `json:"done"`
	Total   int    `json:"total"`
	// Rate is updates with an outcome per second over the window measured.
	Rate float64 `json:"rate_per_second"`
	// ETASeconds is the time left at Rate; absent while the rate is 0 and
	// updates remain.
	ETASeconds *float64 `json:"eta_seconds,omitempty"`
}

// Rates is the progress per channel of now over the span since then was read,
// elapsed long (then nil: from zero, as at the batch's start).
func Rates(now, then []models.ChannelCounts, elapsed time.Duration) []ChannelProgress {
	before := map[string]int{}
	for _, c := range then {
		before[c.Channel] = c.Done()
	}
	out := make([]ChannelProgress, 0, len(now))
	for _, c := range now {
		p := ChannelProgress{Channel: c.Channel, Done: c.Done(), Total: c.Total}
		if s := elapsed.Seconds(); s > 0 {
			p.Rate = float64(p.Done-before[c.Channel]) / s
		}
		left := float64(max(p.Total-p.Done, 0))
		switch {
		case left == 0:
			p.ETASeconds = new(float64)
		case p.Rate > 0:
			eta := left / p.Rate
			p.ETASeconds = &eta
		}
		out = append(out, p)
	}
	return out
}

// Poll is one read of a following batch.
type Poll struct {
	At time.Time
	// State is the batch's state as last described (running until it ended).
	State    string
	Progress store.Progress
}

// DescribeEvery bounds how long a follower goes without describing the batch,
// when its counts never say it may be done (a batch planned with more updates than
// it ended with, or one whose plan is not recorded yet).
const DescribeEvery = 30 * time.Second

// describeEvery is DescribeEvery; the tests shorten it.
var describeEvery = DescribeEvery

// ProgressReader reads a batch's progress; *store.Store is one.
type ProgressReader interface {
	BatchProgress(ctx context.Context, batchID string) (store.Progress, error)
}

// WatchBatch follows a batch from the system of record: every interval it reads
// the batch's progress from the store and hands it to fn, until the batch has
// ended; the last call sees the final counts. It never queries the workflow: it
// describes it once at the start, when the counts say every update has its
// outcome, and at least every DescribeEvery, so following costs Temporal a describe
// per 30 s, not a query per poll. It returns the ended state, or ctx's error.
func WatchBatch(ctx context.Context, tc client.Client, st ProgressReader, batchID string, interval time.Duration,
	fn func(Poll)) (string, error) {
	state, _, err := describeBatch(ctx, tc, batchID)
	if err != nil {
		return "", err
	}
	described := time.Now()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		p, err := st.BatchProgress(ctx, batchID)
		if err != nil {
			return "", err
		}
		now := time.Now()
		if state == StateRunning && (p.Done() || now.Sub(described) >= describeEvery) {
			if state, _, err = describeBatch(ctx, tc, batchID); err != nil {
				return "", err
			}
			described = now
			if state != StateRunning {
				// Outcomes recorded between the read and the end are in the last call.
				if p, err = st.BatchProgress(ctx, batchID); err != nil {
					return "", err
				}
			}
		}
		fn(Poll{At: now, State: state, Progress: p})
		if state != StateRunning {
			return state, nil
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-tick.C:
		}
	}
}
