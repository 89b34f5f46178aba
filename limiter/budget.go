package limiter

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/paritysync/paritysync/models"
)

// ErrBudgetMismatch is returned by CheckConfig when this worker would compute a
// different budget for a channel than the one in force in Redis.
var ErrBudgetMismatch = errors.New("channel budget differs from the one in force")

// A channel's budget identity is what every worker must agree on for the workers
// to share one budget:
//
//	<prefix>{<channel>}:budget   rate_per_minute, burst, scope and window of the first
//	                             worker that checked; TTL 10 min, renewed by every
//	                             decision and every check that agrees
//
// Workers with different key prefixes use different keys, so Redis alone cannot
// tell them apart: the prefix must be the same for every worker of one task queue,
// and the worker checks that on its task queue (worker/prefix.go).

// budgetFields are the identity's fields in the order they are written.
var budgetFields = []string{"rate_per_minute", "burst", "scope", "window"}

func budgetIdentity(c models.ChannelConfig) string {
	vals := []string{fmt.Sprint(c.RatePerMinute), fmt.Sprint(c.Burst), string(c.Scope), c.WindowLength().String()}
	parts := make([]string, len(vals))
	for i, v := range vals {
		parts[i] = budgetFields[i] + "=" + v
	}
	return strings.Join(parts, ";")
}

// CheckConfig compares every channel's budget (rate, burst, scope, window) with the
// one in force in Redis, recording this worker's where none is: a worker calls it at
// start and refuses to start on an error, which names each channel and field that
// differs. A budget stays in force until 10 minutes after the last decision made
// under it, so a changed configuration takes over once the old workers are gone.
// It also loads the decision's library where a server does not have it yet, so
// that the first decision does not.
func (l *Limiter) CheckConfig(ctx context.Context) error {
	if err := loadLibrary(ctx, l.rdb); err != nil {
		return fmt.Errorf("check config: %w", err)
	}
	var errs []error
	for _, slug := range slices.Sorted(maps.Keys(l.channels)) {
		ck := l.channels[slug]
		mine := budgetIdentity(ck.cfg)
		got, err := budgetScript.Run(ctx, l.rdb, []string{ck.base + "budget"}, mine).Text()
		if err != nil {
			return fmt.Errorf("check config %s: %w", slug, err)
		}
		if got == mine {
			continue
		}
		theirs := map[string]string{}
		for _, kv := range strings.Split(got, ";") {
			k, v, _ := strings.Cut(kv, "=")
			theirs[k] = v
		}
		var diffs []string
		for _, kv := range strings.Split(mine, ";") {
			k, v, _ := strings.Cut(kv, "=")
			if theirs[k] != v {
				diffs = append(diffs, fmt.Sprintf("%s %s here, %s in force", k, v, theirs[k]))
			}
		}
		errs = append(errs, fmt.Errorf("channel %s: %s: %w", slug, strings.Join(diffs, ", "), ErrBudgetMismatch))
	}
	return errors.Join(errs...)
}
