package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/google/uuid"
	"github.com/spf13/cobra"
	"go.temporal.io/sdk/client"

	"github.com/paritysync/paritysync/models"
	"github.com/paritysync/paritysync/ops"
)

// readMutations reads a JSON array or JSON lines of mutations with
// models.DecodeMutations. Unknown fields are errors, so a typo in a field name never
// silently drops a value; a file with any bad row is refused whole, the error naming
// the file and every bad row's line and problem.
func readMutations(path string) ([]models.Mutation, error) {
	ms, err := parseMutations(path)
	if err != nil {
		return nil, dataError(err)
	}
	return ms, nil
}

// readBatch reads file's mutations (readMutations), then the configuration: a
// bad file is refused before the configuration is read. The caller closes the deps.
func (c *cli) readBatch(file string) ([]models.Mutation, *deps, error) {
	ms, err := readMutations(file)
	if err != nil {
		return nil, nil, err
	}
	d, err := c.deps()
	if err != nil {
		return nil, nil, err
	}
	return ms, d, nil
}

func parseMutations(path string) ([]models.Mutation, error) {
	body, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	d, err := models.DecodeMutations(body, models.DecodeLimits{})
	var be *models.BodyError
	switch {
	case errors.As(err, &be) && be.Line == 0:
		return nil, fmt.Errorf("%s: %w", path, err)
	case err != nil:
		return nil, fmt.Errorf("%s %w", path, err)
	case len(d.Problems) > 0:
		// The operator fixes the file and starts it again: a batch never starts
		// with part of what the file asked for.
		return nil, fmt.Errorf("%s %s", path, rowProblems(d))
	}
	return d.Mutations, nil
}

// maxProblemDetails bounds the problems rowProblems spells out; the lines of the
// others are still listed, so every bad row is named.
const maxProblemDetails = 20

// rowProblems names every refused row on one line: "line 3: …; line 7: … (2 of 9
// rows refused)".
func rowProblems(d models.Decoded) string {
	var b strings.Builder
	var more []string
	rows := map[int]bool{}
	for i, p := range d.Problems {
		rows[p.Index] = true
		if i >= maxProblemDetails {
			more = append(more, strconv.Itoa(p.Line))
			continue
		}
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(p.Error())
	}
	if len(more) > 0 {
		fmt.Fprintf(&b, "; %d more problems on lines %s", len(more), strings.Join(slices.Compact(more), ", "))
	}
	fmt.Fprintf(&b, " (%d of %d rows refused, nothing started)", len(rows), d.Rows)
	return b.String()
}

func jsonProblem(err error) string {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return fmt.Sprintf("field %s: want %s, got %s", te.Field, te.Type, te.Value)
	}
	return strings.TrimPrefix(err.Error(), "json: ")
}

func (c *cli) batchCmd() *cobra.Command {
	return group("batch", "Start, submit, follow and cancel batches of mutations",
		append([]*cobra.Command{c.batchStartCmd(), c.batchSubmitCmd(), c.batchStatusCmd()}, c.lifecycleCmds()...)...)
}

func (c *cli) batchStartCmd() *cobra.Command {
	var file, id string
	var wait, rerun, dryRun bool
	cmd := &cobra.Command{
		Use:   "start --file FILE [--id ID] [--wait] [--rerun] [--dry-run]",
		Short: "Start a batch (a JSON array or JSON lines of mutations)",
		Long: `Start a BatchSync workflow for the mutations in FILE. The file is read and
checked first, so a malformed file starts nothing. Big batches travel by reference
(stored in PostgreSQL), small ones inline. An --id already running with the same
content is attached to; other content, or a finished id, is refused without
storing anything (--rerun starts a finished one again under a new id).

With --wait, follow the batch (progress on stderr) and print its summary; the exit
status is 3 when some mutations were rejected or dead-lettered. Ctrl-C stops
following, not the batch.

With PARITYSYNC_TENANT=<tenant> the batch is that tenant's: its id is
<tenant>.<id>, so the tenant's API key reads it over intake. Without it the batch
is the operator's. Either way starter writes every property: it reaches Temporal
and PostgreSQL directly, as an operator does, and the tenant's property list is
intake's check (a PMS posts through the API).

With --dry-run, nothing is started, stored or sent, and nothing is dialled: the
file is validated and coalesced exactly as the batch would be, and the rows that
would be rejected (field and rule), the requests and lines per channel and the time
each channel's windows need for them are printed (busiest scope's requests ÷
rate_per_minute windows); the exit status is 3 when some rows would be rejected.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if dryRun {
				if wait || rerun {
					return usageError("batch start: --dry-run starts nothing, so --wait and --rerun do not apply")
				}
				return c.batchDryRun(file, id)
			}
			return c.batchStart(cmd.Context(), file, id, wait, rerun)
		},
	}
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "validate and coalesce FILE, print the requests per channel and the time they need; start nothing")
	cmd.Flags().StringVarP(&file, "file", "f", "", "mutations: a JSON array or JSON lines (required)")
	cmd.Flags().StringVar(&id, "id", "", "batch id (default: generated from the time and a random suffix)")
	cmd.Flags().BoolVarP(&wait, "wait", "w", false, "follow the batch until it ends and print the summary")
	cmd.Flags().BoolVar(&rerun, "rerun", false, "start a finished --id again, as a new batch <id>.rerun-<time>")
	required(cmd, "file")
	return cmd
}

// started is what batch start prints.
type started struct {
	BatchID    string              `json:"batch_id"`
	WorkflowID string              `json:"workflow_id"`
	Mutations  int                 `json:"mutations"`
	UI         string              `json:"ui"`
	Status     *models.BatchStatus `json:"status,omitempty"`
}

func (c *cli) batchStart(ctx context.Context, file, id string, wait, rerun bool) error {
	ms, d, err := c.readBatch(file)
	if err != nil {
		return err
	}
	defer d.close()

	batchID := id
	if batchID == "" {
		batchID = ops.TimedBatchID("", time.Now(), uuid.NewString()[:8])
	}
	if tenant := strings.TrimSpace(c.getenv("PARITYSYNC_TENANT")); tenant != "" {
		if !ops.TenantPattern.MatchString(tenant) {
			return usageError(fmt.Sprintf("PARITYSYNC_TENANT %q: must match %s", tenant, ops.TenantPattern))
		}
		// The tenant's batch: intake lets that tenant's key read it.
		if !strings.HasPrefix(batchID, tenant+".") {
			batchID = tenant + "." + batchID
		}
	}
	if ms, err = c.fanOut(ctx, d, file, ms); err != nil {
		return err
	}
	if err := d.dial(ctx, useTemporal); err != nil {
		return err
	}
	// The claim check of a big batch opens the store only when it is needed.
	saver := saverFunc(func(ctx context.Context, batchID string, ms []models.Mutation) (string, error) {
		st, err := d.store(ctx)
		if err != nil {
			return "", err
		}
		return st.SaveBatch(ctx, batchID, ms)
	})
	b, err := ops.StartBatch(ctx, d.tc, d.settings.TaskQueue, saver, ops.Batch{ID: batchID, Mutations: ms})
	var conflict *ops.ConflictError
	if errors.As(err, &conflict) && rerun && !conflict.Running {
		batchID = rerunID(batchID, time.Now())
		b, err = ops.StartBatch(ctx, d.tc, d.settings.TaskQueue, saver, ops.Batch{ID: batchID, Mutations: ms})
	}
	if errors.As(err, &conflict) {
		hint := "pick another --id"
		if !conflict.Running {
			hint = "--rerun starts it again under a new id"
		}
		return fmt.Errorf("%w; %s", err, hint)
	}
	if err != nil {
		return err
	}
	wfID := b.WorkflowID
	if b.Attached {
		fmt.Fprintf(c.stdout, "attached to %s, running with the same content (nothing started, nothing stored)\n%s\n",
			wfID, d.uiLink(wfID))
		if !wait {
			return nil
		}
		st, err := c.followBatch(ctx, c.follower(d, b.Run, batchID), batchID, d.uiLink(wfID))
		if err != nil {
			return err
		}
		return c.summary(st)
	}
	run := b.Run
	out := started{BatchID: batchID, WorkflowID: wfID, Mutations: len(ms), UI: d.uiLink(wfID)}
	if !wait {
		if c.json() {
			return c.writeJSON(out)
		}
		fmt.Fprintf(c.stdout, "started %s (%d mutations)\n%s\n", wfID, len(ms), out.UI)
		return nil
	}
	c.diag("started %s (%d mutations); following it (Ctrl-C stops following, not the batch)\n%s", wfID, len(ms), out.UI)
	st, err := c.followBatch(ctx, c.follower(d, run, batchID), batchID, out.UI)
	if err != nil {
		return err
	}
	if c.json() {
		out.Status = &st
		if err := c.writeJSON(out); err != nil {
			return err
		}
		return verdict(st)
	}
	return c.summary(st)
}

// batchDryRun prints what starting file would do (ops.DryRun), and starts nothing.
func (c *cli) batchDryRun(file, id string) error {
	body, err := os.ReadFile(file)
	if err != nil {
		return dataError(fmt.Errorf("read %s: %w", file, err))
	}
	decoded, err := models.DecodeMutations(body, models.DecodeLimits{})
	if err != nil {
		return dataError(fmt.Errorf("%s: %w", file, err))
	}
	d, err := c.deps()
	if err != nil {
		return err
	}
	defer d.close()
	v, err := ops.NewValidator(d.settings, d.channels)
	if err != nil {
		return configError(err)
	}
	if id == "" {
		id = "dry-run"
	}
	if ops.NeedsFanOut(decoded.Mutations) {
		st, err := d.store(context.Background())
		if err != nil {
			return err
		}
		if decoded, err = ops.FanOut(context.Background(), st, decoded); err != nil {
			return err
		}
	}
	if v, err = d.withStoredCodes(context.Background(), v, decoded.Mutations); err != nil {
		return err
	}
	r := ops.DryRun(decoded, v, v.Channels, d.settings.MaxInFlight, id)
	verdict := error(nil)
	if len(r.Rejected) > 0 {
		verdict = errReported
	}
	if c.json() {
		if err := c.writeJSON(r); err != nil {
			return err
		}
		return verdict
	}
	for _, p := range r.Rejected {
		fmt.Fprintf(c.stdout, "would reject %s\n", p.Error())
	}
	t := newTable(c.stdout, "channel\tupdates\tsuperseded\trequests\tlines\tproperties\trate\tbusiest\ttime needed\t", tabwriter.AlignRight)
	for _, p := range r.Channels {
		t.row("%s\t%d\t%d\t%d\t%d\t%d\t%d/%s %s\t%d\t%s\t", p.Channel, p.Updates, p.Superseded, p.Requests, p.Lines,
			p.Properties, p.RatePerMinute, p.Window, p.Scope, p.BusiestRequests, p.TimeNeeded)
	}
	_ = t.flush()
	fmt.Fprintf(c.stdout, "dry run: %d of %d rows accepted, %d rejected; %d requests (%d lines); the windows need %s; nothing started\n",
		r.Accepted, r.Mutations, len(r.Rejected), r.Requests, r.Lines, r.TimeNeeded)
	return verdict
}

// fanOut turns the mutations of file for channel "*" into one per channel their
// property is on (the store's mappings, as intake does); a row that cannot fan out
// refuses the whole file, as any bad row does. Without such a row it opens nothing.
func (c *cli) fanOut(ctx context.Context, d *deps, file string, ms []models.Mutation) ([]models.Mutation, error) {
	if !ops.NeedsFanOut(ms) {
		return ms, nil
	}
	st, err := d.store(ctx)
	if err != nil {
		return nil, err
	}
	out, problems, err := ops.FanOutMutations(ctx, st, ms)
	if err != nil {
		return nil, err
	}
	if len(problems) > 0 {
		p := problems[0]
		return nil, dataError(fmt.Errorf("%s: row %d (id %s): %s: %s; nothing started", file, p.Index+1, p.ID, p.Field, p.Rule))
	}
	return out, nil
}

// saverFunc is a function keeping a big batch's claim check.
type saverFunc func(ctx context.Context, batchID string, ms []models.Mutation) (string, error)

// SaveBatch calls f.
func (f saverFunc) SaveBatch(ctx context.Context, batchID string, ms []models.Mutation) (string, error) {
	return f(ctx, batchID, ms)
}

// followBatch follows a started batch with follow; when the operator interrupts, it
// says that the batch goes on and how to follow it again.
func (c *cli) followBatch(ctx context.Context, follow func(context.Context) (models.BatchStatus, error),
	batchID, ui string) (models.BatchStatus, error) {
	st, err := follow(ctx)
	if err != nil && ctx.Err() != nil {
		return st, interruptedError(fmt.Sprintf("interrupted: batch %s keeps running on the workers; "+
			"follow it with 'starter batch status %s' or at %s", batchID, batchID, ui))
	}
	return st, err
}

// Following a batch: the store is read every pollEvery (a cheap read of its
// counters), a progress line per channel printed at least every progressEvery, and
// the rate measured over the last rateWindow.
const (
	pollEvery     = time.Second
	progressEvery = 5 * time.Second
	rateWindow    = 30 * time.Second
)

// follower follows batchID until it ends, printing progress on stderr, and returns
// its final status: the workflow's result with the store's counts (ops.ResultCounts, as
// batch status counts).
func (c *cli) follower(d *deps, run client.WorkflowRun, batchID string) func(context.Context) (models.BatchStatus, error) {
	return func(ctx context.Context) (models.BatchStatus, error) {
		var final models.BatchStatus
		st, err := d.store(ctx)
		if err != nil {
			return final, err
		}
		pr := progressPrinter{c: c}
		if _, err := ops.WatchBatch(ctx, d.tc, st, batchID, pollEvery, pr.poll); err != nil {
			return final, err
		}
		// The batch has ended: its result is in the history (no query, no worker).
		if err := run.Get(ctx, &final); err != nil {
			return final, fmt.Errorf("batch %s: %w", run.GetID(), err)
		}
		final.Channels = ops.ResultCounts(pr.last.Progress.Channels, &final)
		if final.BatchID == "" {
			final.BatchID = batchID
		}
		return final, nil
	}
}

// progressPrinter prints a batch's progress per channel from successive polls.
type progressPrinter struct {
	c       *cli
	samples []ops.Poll // the polls of the last rateWindow, oldest first
	printed time.Time
	last    ops.Poll
}

// poll takes one poll and prints a line per channel when progressEvery has passed,
// on the first poll and on the last.
func (p *progressPrinter) poll(poll ops.Poll) {
	p.last = poll
	// The rate counts from the plan on: what PrepareBatch decided at once
	// (rejections, supersessions) would make it a burst that never repeats.
	if poll.Progress.Planned {
		p.samples = append(p.samples, poll)
	}
	for len(p.samples) > 1 && poll.At.Sub(p.samples[0].At) > rateWindow {
		p.samples = p.samples[1:]
	}
	if !p.printed.IsZero() && poll.At.Sub(p.printed) < progressEvery && poll.State == ops.StateRunning {
		return
	}
	oldest := poll
	if len(p.samples) > 0 {
		oldest = p.samples[0]
	}
	for _, r := range ops.Rates(poll.Progress.Channels, oldest.Progress.Channels, poll.At.Sub(oldest.At)) {
		// Before the batch is planned there may be no channel yet: the first lines
		// come with the first counts.
		p.printed = poll.At
		p.c.diag("%s %-12s %s", poll.At.Format("15:04:05"), r.Channel, progressLine(r))
	}
}

// progressLine is "done/total (pct) rate/s ETA eta".
func progressLine(r ops.ChannelProgress) string {
	pct := 100.0
	if r.Total > 0 {
		pct = 100 * float64(r.Done) / float64(r.Total)
	}
	eta := "-"
	if r.ETASeconds != nil {
		eta = time.Duration(*r.ETASeconds * float64(time.Second)).Round(time.Second).String()
		if eta == "0s" && r.Done < r.Total {
			eta = "<1s"
		}
	}
	return fmt.Sprintf("%d/%d (%.1f%%) %.1f/s ETA %s", r.Done, r.Total, pct, r.Rate, eta)
}

// verdict is errReported unless every update was committed or superseded.
func verdict(st models.BatchStatus) error {
	t := st.Totals()
	if t.Rejected > 0 || t.DeadLettered > 0 || t.Total != t.Done() {
		return errReported
	}
	return nil
}

// summary prints the listed rejections, then the per-channel table (so it stays on
// screen), says how many rejections it did not list and where they are, and
// returns verdict(st).
func (c *cli) summary(st models.BatchStatus) error {
	for _, r := range st.Rejected {
		fmt.Fprintf(c.stdout, "rejected %s (%s): %s\n", r.MutationID, r.Channel, models.ValidationError(r.Problems).Error())
	}
	t := newTable(c.stdout, "channel\ttotal\tcommitted\tsuperseded\trejected\tdead-lettered\tdeferred\trequests\t", tabwriter.AlignRight)
	for _, ch := range append(st.Channels, st.Totals()) {
		t.row("%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t", ch.Channel, ch.Total, ch.Committed, ch.Superseded,
			ch.Rejected, ch.DeadLettered, ch.Deferred, ch.Requests)
	}
	_ = t.flush()
	tot := st.Totals()
	if more := tot.Rejected - len(st.Rejected); more > 0 {
		// The batch's plan lists the first 50 (PrepareBatch's bound); the store
		// holds every one.
		fmt.Fprintf(c.stdout, "%d more rejections not listed above (%d of %d listed); 'starter batch rejections %s' lists every one with its reasons\n",
			more, len(st.Rejected), tot.Rejected, st.BatchID)
	}
	if lost := tot.Total - tot.Done(); lost != 0 && st.Done {
		c.diag("WARNING: %d updates without an outcome", lost)
	}
	return verdict(st)
}

func (c *cli) batchStatusCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "status BATCH_ID",
		Short: "Ask a batch for its counts (BATCH_ID or batch/BATCH_ID)",
		Long: `Show a batch's state as Temporal records it (running, done, cancelled,
terminated) and its progress per update from the store, which answers even when no
worker does. Table and --output json print the same counts; once the batch has
ended the exit status is 3 when some mutations were rejected, dead-lettered or left
without an outcome (0 while it runs), and 66 for a batch Temporal does not know.`,
		Args:              exactArgs(1, "exactly one batch id"),
		ValidArgsFunction: c.batchArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return c.batchStatus(cmd.Context(), args[0])
		},
	}
}
