package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	enumspb "go.temporal.io/api/enums/v1"
	taskqueuepb "go.temporal.io/api/taskqueue/v1"
	"go.temporal.io/api/workflowservice/v1"

	"github.com/paritysync/paritysync/limiter"
	"github.com/paritysync/paritysync/models"
	"github.com/paritysync/paritysync/ops"
)

// Overall states of starter status, in rising order; the exit status is the index.
const (
	stateOK       = "ok"
	stateWarn     = "warn"
	statePage     = "page"
	stateCritical = "critical"
)

var stateRank = map[string]int{stateOK: exitOK, stateWarn: exitWarn, statePage: exitPage, stateCritical: exitThrottle}

// lagWarnAfter is the parity lag status warns at: the default threshold of the
// ParitysyncParityLag alert (deploy/prometheus/alerts.yml).
const lagWarnAfter = 10 * time.Minute

// lagWindow is the window of the acknowledgement quantiles status shows.
const lagWindow = time.Hour

func (c *cli) statusCmd() *cobra.Command {
	var property string
	cmd := &cobra.Command{
		Use:   "status [--property PROPERTY]",
		Short: "One view: workers polling, channels, running batches, open dead letters, parity lag; exit status by the worst",
		Long: `Print what an operator checks first, in one view:
  workers   the pollers Temporal sees on the task queue (workflow and activity)
  channels  per channel: pause, back-off, circuit breaker, quota tier and window
            use (the limiter's state in Redis), open dead letters, and the parity
            lag: the age of the oldest change not acknowledged yet, the updates
            still owed, and p50/p99 from acceptance to acknowledgement over the
            last hour (PostgreSQL)
  batches   every running batch with its done/total (PostgreSQL)
then one "problem:" line per thing that is not ok.

--property PROPERTY shows that property's lag per channel instead of the
channel's: the age of its oldest desired change the channel has not
acknowledged, how many of its cells (night × room type × rate plan × family,
from yesterday on) are owed, and its own p50/p99; a change older than 10
minutes warns as for a channel.

The exit status is the worst state found:
  0 ok
  1 warn: a channel paused or backing off, quota ≥ 70 %, open dead letters, or
    a change older than 10 minutes not acknowledged yet
  2 page: no worker polls the task queue, a circuit breaker open, quota ≥ 85 %
  3 critical: quota ≥ 95 % or a family stopped by quota_exhausted
A source that cannot be read (Redis, Temporal, PostgreSQL) exits 69 after the
rest is printed.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return c.status(cmd.Context(), property) },
	}
	cmd.Flags().StringVarP(&property, "property", "p", "", "show this property's parity lag per channel")
	return cmd
}

// pollerRow is one poller of the task queue.
type pollerRow struct {
	Identity   string    `json:"identity"`
	Kind       string    `json:"kind"` // workflow or activity
	LastAccess time.Time `json:"last_access"`
}

// channelView is one channel as status shows it.
type channelView struct {
	quotaRow
	OpenDeadLetters int `json:"open_dead_letters"`
	// Parity lag: Property is set with --property (then Oldest is the age of the
	// property's oldest change not acknowledged, OwedCells its cells owed, and
	// Pending 0).
	Property       string  `json:"lag_property_id,omitempty"`
	OldestSeconds  float64 `json:"lag_oldest_seconds"`
	PendingUpdates int     `json:"lag_pending_updates"`
	OwedCells      int     `json:"lag_owed_cells,omitempty"`
	AckedUpdates   int     `json:"lag_acked_updates"`
	P50Seconds     float64 `json:"lag_p50_seconds"`
	P99Seconds     float64 `json:"lag_p99_seconds"`
	State          string  `json:"state"`
}

// batchView is one running batch with its progress from the store.
type batchView struct {
	BatchID  string                 `json:"batch_id"`
	Started  time.Time              `json:"started"`
	Done     int                    `json:"done"`
	Total    int                    `json:"total"`
	Planned  bool                   `json:"planned"`
	Channels []models.ChannelCounts `json:"channels"`
}

// statusView is what status prints.
type statusView struct {
	TaskQueue       string        `json:"task_queue"`
	Workers         []pollerRow   `json:"workers"`
	Channels        []channelView `json:"channels"`
	Batches         []batchView   `json:"running_batches"`
	OpenDeadLetters int           `json:"open_dead_letters"`
	Problems        []string      `json:"problems"`
	State           string        `json:"state"`
	Exit            int           `json:"exit_status"`
}

// problem records a finding at state s.
func (v *statusView) problem(s, format string, args ...any) {
	v.Problems = append(v.Problems, fmt.Sprintf("%s: %s", s, fmt.Sprintf(format, args...)))
	if stateRank[s] > stateRank[v.State] {
		v.State = s
	}
}

func (c *cli) status(ctx context.Context, property string) error {
	d, err := c.deps()
	if err != nil {
		return err
	}
	defer d.close()
	v := statusView{TaskQueue: d.settings.TaskQueue, State: stateOK, Workers: []pollerRow{}, Batches: []batchView{},
		Problems: []string{}}
	var errs []error
	slugs, _ := d.selectChannels("")
	views := map[string]*channelView{}
	for _, s := range slugs {
		views[s] = &channelView{quotaRow: quotaRow{QuotaRow: ops.QuotaRow{Channel: s}}, Property: property, State: stateOK}
	}

	// The limiter's state in Redis.
	if lim, err := d.limiter(ctx); err != nil {
		errs = append(errs, err)
	} else if read, err := ops.Quota(ctx, lim, slugs); err != nil {
		errs = append(errs, err)
	} else {
		for _, r := range d.quotaRows(read) {
			views[r.Channel].quotaRow = r
		}
	}
	// Temporal: the pollers and the running batches.
	var running []batchView
	workersKnown := false
	if tc, err := d.temporal(ctx); err != nil {
		errs = append(errs, err)
	} else {
		if v.Workers, err = pollers(ctx, tc, d.settings.TaskQueue); err != nil {
			errs = append(errs, err)
		} else {
			workersKnown = true
		}
		if running, err = runningBatches(ctx, tc); err != nil {
			errs = append(errs, err)
		}
	}
	// PostgreSQL: progress, dead letters, parity lag.
	if st, err := d.store(ctx); err != nil {
		errs = append(errs, err)
		v.Batches = append(v.Batches, running...) // running, progress unknown
	} else {
		for _, b := range running {
			p, err := st.BatchProgress(ctx, b.BatchID)
			if err != nil {
				errs = append(errs, err)
				break
			}
			b.Planned, b.Channels = p.Planned, p.Channels
			for _, ch := range p.Channels {
				b.Done += ch.Done()
				b.Total += ch.Total
			}
			v.Batches = append(v.Batches, b)
		}
		if open, err := st.OpenDeadLetters(ctx); err != nil {
			errs = append(errs, err)
		} else {
			for slug, n := range open {
				if cv, ok := views[slug]; ok {
					cv.OpenDeadLetters = n
				}
				v.OpenDeadLetters += n
			}
		}
		if lags, err := st.ParityLag(ctx, lagWindow, property); err != nil {
			errs = append(errs, err)
		} else {
			for _, l := range lags {
				if cv, ok := views[l.Channel]; ok {
					cv.OldestSeconds, cv.PendingUpdates, cv.AckedUpdates = l.Oldest.Seconds(), l.Pending, l.Acked
					cv.OwedCells = l.OwedCells
					cv.P50Seconds, cv.P99Seconds = l.P50.Seconds(), l.P99.Seconds()
				}
			}
		}
	}
	for _, s := range slugs {
		v.Channels = append(v.Channels, *views[s])
	}
	judge(&v, workersKnown)
	if c.json() {
		if err := c.writeJSON(v); err != nil {
			return err
		}
	} else if err := c.statusViewTable(v); err != nil {
		return err
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	if v.Exit != exitOK {
		return tierExit{v.Exit}
	}
	return nil
}

// judge sets every channel's state, the problems and the overall state and exit
// status of v. workersKnown is false when Temporal could not be asked.
func judge(v *statusView, workersKnown bool) {
	kinds := map[string]bool{}
	for _, w := range v.Workers {
		kinds[w.Kind] = true
	}
	if workersKnown {
		for _, k := range []string{"workflow", "activity"} {
			if !kinds[k] {
				v.problem(statePage, "no worker polls task queue %s for %s tasks", v.TaskQueue, k)
			}
		}
	}
	for i := range v.Channels {
		cv := &v.Channels[i]
		mark := func(s, format string, args ...any) {
			v.problem(s, cv.Channel+" "+format, args...)
			if stateRank[s] > stateRank[cv.State] {
				cv.State = s
			}
		}
		switch cv.Tier {
		case limiter.TierWarn:
			mark(stateWarn, "used %.1f %% of its daily quota", cv.UsedPercent)
		case limiter.TierPage:
			mark(statePage, "used %.1f %% of its daily quota", cv.UsedPercent)
		case limiter.TierThrottle, limiter.TierStop:
			mark(stateCritical, "used %.1f %% of its daily quota (%s)", cv.UsedPercent, cv.Tier)
		}
		for _, f := range cv.Stopped {
			mark(stateCritical, "%s stopped by quota_exhausted until %s", f.Family, f.Until.Format(time.RFC3339))
		}
		if cv.Paused != "" {
			mark(stateWarn, "paused: %s", cv.Paused)
		}
		if cv.BackoffSeconds > 0 {
			mark(stateWarn, "backing off for %s after a 429/503", seconds(cv.BackoffSeconds).Round(time.Second))
		}
		if cv.Breaker == limiter.BreakerOpen || cv.Breaker == limiter.BreakerHalf {
			mark(statePage, "circuit breaker %s", cv.Breaker)
		}
		if cv.OpenDeadLetters > 0 {
			mark(stateWarn, "%d open dead letters ('starter dlq list --channel %s')", cv.OpenDeadLetters, cv.Channel)
		}
		switch age := seconds(cv.OldestSeconds); {
		case age <= lagWarnAfter:
		case cv.Property != "":
			mark(stateWarn, "parity lag of %s: a change desired %s ago is not acknowledged yet (%d cells owed)",
				cv.Property, age.Round(time.Second), cv.OwedCells)
		default:
			mark(stateWarn, "parity lag: a change accepted %s ago is not acknowledged yet (%d updates owed)",
				age.Round(time.Second), cv.PendingUpdates)
		}
	}
	v.Exit = stateRank[v.State]
}

// statusViewTable prints v as three tables and the problems.
func (c *cli) statusViewTable(v statusView) error {
	w := c.stdout
	fmt.Fprintf(w, "state %s: %d workers polling %s, %d running batches, %d open dead letters\n\n", v.State,
		distinctWorkers(v.Workers), v.TaskQueue, len(v.Batches), v.OpenDeadLetters)
	t := newTable(w, "worker\tpolls\tlast poll", 0)
	for _, p := range v.Workers {
		t.row("%s\t%s\t%s", p.Identity, p.Kind, p.LastAccess.Local().Format("15:04:05"))
	}
	if err := t.flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	lagHead := "lag oldest\towed"
	if len(v.Channels) > 0 && v.Channels[0].Property != "" {
		lagHead = v.Channels[0].Property + " oldest\towed cells"
	}
	t = newTable(w, "channel\tstate\tpaused\tback-off\tbreaker\ttier\tquota used\twindow\tdead letters\t"+lagHead+"\tacked 1h\tp50\tp99", 0)
	for _, cv := range v.Channels {
		paused := cv.Paused
		if paused == "" {
			paused = "-"
		}
		owed := cv.PendingUpdates
		if cv.Property != "" {
			owed = cv.OwedCells
		}
		lag := fmt.Sprintf("%s\t%d", seconds(cv.OldestSeconds).Round(time.Second), owed)
		// A per-property channel has a window per property: its limit, no one count.
		window := fmt.Sprintf("%d/%s", cv.InWindow, cv.windowLimit())
		if cv.Scope == models.ScopeProperty {
			window = cv.windowLimit()
		}
		t.row("%s\t%s\t%s\t%s\t%s\t%s\t%.1f%%\t%s\t%d\t%s\t%d\t%s\t%s", cv.Channel, cv.State, paused,
			seconds(cv.BackoffSeconds).Round(time.Second), orDash(cv.Breaker), orDash(string(cv.Tier)), cv.UsedPercent,
			window, cv.OpenDeadLetters, lag, cv.AckedUpdates,
			seconds(cv.P50Seconds).Round(10*time.Millisecond), seconds(cv.P99Seconds).Round(10*time.Millisecond))
	}
	if err := t.flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	t = newTable(w, "batch\trunning for\tdone\tper channel", 0)
	for _, b := range v.Batches {
		var per []string
		for _, ch := range b.Channels {
			per = append(per, fmt.Sprintf("%s %d/%d", ch.Channel, ch.Done(), ch.Total))
		}
		done := fmt.Sprintf("%d/%d (%.1f%%)", b.Done, b.Total, percent(b.Done, b.Total))
		if !b.Planned {
			done = "planning"
		}
		t.row("%s\t%s\t%s\t%s", b.BatchID, time.Since(b.Started).Round(time.Second), done, strings.Join(per, ", "))
	}
	if err := t.flush(); err != nil {
		return err
	}
	for _, p := range v.Problems {
		fmt.Fprintf(w, "problem: %s\n", p)
	}
	return nil
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func percent(n, of int) float64 {
	if of == 0 {
		return 0
	}
	return float64(n) * 100 / float64(of)
}

func distinctWorkers(ps []pollerRow) int {
	var ids []string
	for _, p := range ps {
		if !slices.Contains(ids, p.Identity) {
			ids = append(ids, p.Identity)
		}
	}
	return len(ids)
}

// describer is the part of the Temporal client pollers needs.
type describer interface {
	DescribeTaskQueue(ctx context.Context, taskQueue string, taskQueueType enumspb.TaskQueueType) (*workflowservice.DescribeTaskQueueResponse, error)
}

// pollers lists the workflow and activity pollers of queue, by identity.
func pollers(ctx context.Context, tc describer, queue string) ([]pollerRow, error) {
	out := []pollerRow{}
	for _, k := range []struct {
		kind string
		typ  enumspb.TaskQueueType
	}{{"workflow", enumspb.TASK_QUEUE_TYPE_WORKFLOW}, {"activity", enumspb.TASK_QUEUE_TYPE_ACTIVITY}} {
		resp, err := tc.DescribeTaskQueue(ctx, queue, k.typ)
		if err != nil {
			return out, fmt.Errorf("describe task queue %s: %w", queue, err)
		}
		for _, p := range resp.GetPollers() {
			out = append(out, pollerOf(p, k.kind))
		}
	}
	slices.SortFunc(out, func(a, b pollerRow) int { return strings.Compare(a.Identity+a.Kind, b.Identity+b.Kind) })
	return out, nil
}

func pollerOf(p *taskqueuepb.PollerInfo, kind string) pollerRow {
	return pollerRow{Identity: p.GetIdentity(), Kind: kind, LastAccess: p.GetLastAccessTime().AsTime()}
}

// runningBatches lists the running batches (visibility, no query), progress unknown.
func runningBatches(ctx context.Context, tc ops.WorkflowLister) ([]batchView, error) {
	list, err := ops.RunningBatches(ctx, tc)
	out := make([]batchView, len(list))
	for i, b := range list {
		out[i] = batchView{BatchID: b.BatchID, Started: b.Started, Channels: []models.ChannelCounts{}}
	}
	return out, err
}
