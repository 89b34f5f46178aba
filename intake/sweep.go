package main

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/paritysync/paritysync/activities/store"
	"github.com/paritysync/paritysync/ops"
)

// The batch sweeper. BatchSync records how a batch ended (FinishBatch) in every
// end it runs to, but a batch terminated from the UI or the CLI, or one that
// failed or timed out, runs no more code: the store would list it running for
// ever. Every intake sweeps: every half interval it takes the batches the store
// records running whose last look is at least an interval old (store.ClaimRunning,
// shared by every intake, so each running batch is described about once per
// interval in all), describes each in Temporal and records the end of those that
// ended. A listing never asks Temporal: it costs Temporal one describe per running
// batch per interval, whatever the number of listings, and tells a batch's end at
// most about one and a half intervals late.
const (
	// DefaultBatchSweep is the sweeper's interval.
	DefaultBatchSweep = 30 * time.Second
	// sweepClaim is how many batches one claim takes; a sweep claims again while
	// claims come back full.
	sweepClaim = 100
	// sweepGone is how old a batch Temporal does not know must be before it is
	// recorded unknown: its start may still be on its way (the payload is saved
	// before the workflow starts), and a start that failed leaves such a row.
	sweepGone = 10 * time.Minute
)

// batchSweeper records the end of batches that ended without recording it.
type batchSweeper struct {
	tc    client.Client
	st    *store.Store
	every time.Duration
	log   *slog.Logger
}

// run sweeps every half interval until ctx ends.
func (b *batchSweeper) run(ctx context.Context) {
	onTicks(ctx, b.every/2, func() {
		if err := b.sweep(ctx); err != nil && ctx.Err() == nil {
			b.log.Warn("batch sweep", "error", err)
		}
	})
}

// onTicks calls fn every period until ctx ends: intake's background loops.
func onTicks(ctx context.Context, period time.Duration, fn func()) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		fn()
	}
}

// sweep looks at every running batch due a look and records the ends it finds.
func (b *batchSweeper) sweep(ctx context.Context) error {
	for {
		due, err := b.st.ClaimRunning(ctx, sweepClaim, b.every)
		if err != nil {
			return err
		}
		for _, r := range due {
			if err := b.look(ctx, r); err != nil {
				return err
			}
		}
		if len(due) < sweepClaim {
			return nil
		}
	}
}

// look describes one batch the store records running and records its end if it
// has ended.
func (b *batchSweeper) look(ctx context.Context, r store.RunningBatch) error {
	state, _, err := ops.DescribeBatch(ctx, b.tc, r.BatchID)
	switch {
	case errors.Is(err, ops.ErrNoBatch):
		if time.Since(r.CreatedAt) < sweepGone {
			return nil
		}
		state = ""
	case err != nil:
		return err
	case state == ops.StateRunning:
		return nil
	}
	b.log.Info("batch ended without recording it", "batch", r.BatchID, "state", state)
	return b.st.EndedUnseen(ctx, r.BatchID, state)
}
