package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/google/uuid"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/paritysync/paritysync/models"
	"github.com/paritysync/paritysync/workflows"
)

// readMutations reads a JSON array or JSON lines of mutations. Unknown fields are
// errors, so a typo in a field name never silently drops a value; the error names
// the file, the line and the problem.
func readMutations(path string) ([]models.Mutation, error) {
	body, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	trimmed := bytes.TrimLeft(body, " \t\r\n")
	if len(trimmed) == 0 {
		return nil, fmt.Errorf("%s: no mutations", path)
	}
	if trimmed[0] == '[' {
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.DisallowUnknownFields()
		var ms []models.Mutation
		if err := dec.Decode(&ms); err != nil {
			return nil, fmt.Errorf("%s line %d: %s", path, lineOf(body, errOffset(err, dec)), jsonProblem(err))
		}
		if dec.More() {
			return nil, fmt.Errorf("%s line %d: data after the JSON array", path, lineOf(body, dec.InputOffset()))
		}
		if len(ms) == 0 {
			return nil, fmt.Errorf("%s: no mutations", path)
		}
		return ms, nil
	}
	var ms []models.Mutation
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(make([]byte, 64*1024), 4*1024*1024)
	for n := 1; sc.Scan(); n++ {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		dec := json.NewDecoder(bytes.NewReader(line))
		dec.DisallowUnknownFields()
		var m models.Mutation
		if err := dec.Decode(&m); err != nil {
			return nil, fmt.Errorf("%s line %d: %s", path, n, jsonProblem(err))
		}
		if dec.More() {
			return nil, fmt.Errorf("%s line %d: more than one JSON value on the line", path, n)
		}
		ms = append(ms, m)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(ms) == 0 {
		return nil, fmt.Errorf("%s: no mutations", path)
	}
	return ms, nil
}

func errOffset(err error, dec *json.Decoder) int64 {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		return se.Offset
	case errors.As(err, &te):
		return te.Offset
	}
	return dec.InputOffset()
}

func jsonProblem(err error) string {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return fmt.Sprintf("field %s: want %s, got %s", te.Field, te.Type, te.Value)
	}
	return strings.TrimPrefix(err.Error(), "json: ")
}

func lineOf(body []byte, offset int64) int {
	offset = min(max(offset, 0), int64(len(body)))
	return bytes.Count(body[:offset], []byte("\n")) + 1
}

// readFileFlag parses a command's flags and reads the mutations its --file names.
func readFileFlag(fs *flag.FlagSet, file *string, args []string) ([]models.Mutation, error) {
	if err := parseFlags(fs, args); err != nil {
		return nil, err
	}
	if *file == "" {
		return nil, usageError{fs.Name() + ": --file is required"}
	}
	return readMutations(*file)
}

func batchStart(args []string, out io.Writer, getenv func(string) string) error {
	fs := flag.NewFlagSet("batch start", flag.ContinueOnError)
	file := fs.String("file", "", "mutations: a JSON array or JSON lines")
	id := fs.String("id", "", "batch id (default: generated)")
	wait := fs.Bool("wait", false, "follow the batch until it ends and print the summary")
	rerun := fs.Bool("rerun", false, "start a finished --id again, as a new batch <id>.rerun-<time>")
	ms, err := readFileFlag(fs, file, args)
	if err != nil {
		return err
	}
	d, err := loadDeps(getenv)
	if err != nil {
		return err
	}
	defer d.close()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()

	batchID := *id
	if batchID == "" {
		batchID = time.Now().UTC().Format("20060102-150405") + "-" + uuid.NewString()[:8]
	}
	tc, err := d.temporal(ctx)
	if err != nil {
		return err
	}
	// An id in use is looked at before anything is stored: the same content running
	// is attached to, anything else refused, and no payload is overwritten.
	digest, err := contentDigest(ms)
	if err != nil {
		return err
	}
	attach, err := existingBatch(ctx, tc, models.BatchWorkflowID(batchID), digest)
	if errors.Is(err, errBatchExists) && *rerun && !attach {
		batchID = rerunID(batchID, time.Now())
		attach, err = existingBatch(ctx, tc, models.BatchWorkflowID(batchID), digest)
	}
	if err != nil {
		return err
	}
	if attach {
		wfID := models.BatchWorkflowID(batchID)
		fmt.Fprintf(out, "attached to %s, running with the same content (nothing started, nothing stored)\n%s\n",
			wfID, d.uiLink(wfID))
		if !*wait {
			return nil
		}
		st, err := follow(ctx, tc, tc.GetWorkflow(ctx, wfID, ""), out, d.outcomes(batchID))
		if err != nil {
			return err
		}
		return summary(st, out)
	}
	in := models.BatchSyncInput{BatchID: batchID, Retry: models.DefaultRetryPolicy()}
	if len(ms) > models.MaxInlineMutations {
		// Big batches travel by reference: the workflow input stays small.
		st, err := d.store(ctx)
		if err != nil {
			return err
		}
		if in.PayloadKey, err = st.SaveBatch(ctx, batchID, ms); err != nil {
			return err
		}
	} else {
		in.Mutations = ms
	}
	wfID := models.BatchWorkflowID(batchID)
	run, err := tc.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID: wfID, TaskQueue: d.settings.TaskQueue,
		// A finished id is never run again under the same id (--rerun takes a new
		// one), and a running one is never joined by a second start.
		WorkflowIDReusePolicy:    enumspb.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE,
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_FAIL,
		Memo:                     map[string]any{memoContent: digest},
		TypedSearchAttributes: temporal.NewSearchAttributes(
			temporal.NewSearchAttributeKeyKeyword(models.SearchAttrBatchID).ValueSet(batchID)),
	}, workflows.BatchSync, in)
	if err != nil {
		return fmt.Errorf("start batch %s: %w", batchID, err)
	}
	fmt.Fprintf(out, "started %s (%d mutations)\n%s\n", wfID, len(ms), d.uiLink(wfID))
	if !*wait {
		return nil
	}
	st, err := follow(ctx, tc, run, out, d.outcomes(batchID))
	if err != nil {
		return err
	}
	return summary(st, out)
}

// follow prints a progress line per channel whenever its counts change, until the
// batch ends, and returns the final status. The workflow says how many updates each
// channel has; outcomes, when not nil, says how many of them have an outcome as
// they are recorded, request by request.
func follow(ctx context.Context, tc client.Client, run client.WorkflowRun, out io.Writer,
	outcomes func(context.Context) ([]models.ChannelCounts, error)) (models.BatchStatus, error) {
	done := make(chan error, 1)
	var final models.BatchStatus
	go func() { done <- run.Get(ctx, &final) }()
	last := map[string]models.ChannelCounts{}
	tick := time.NewTicker(2 * time.Second)
	defer tick.Stop()
	for {
		select {
		case err := <-done:
			if err != nil {
				return final, fmt.Errorf("batch %s: %w", run.GetID(), err)
			}
			return final, nil
		case <-tick.C:
			st, err := queryStatus(ctx, tc, run.GetID())
			if err != nil {
				continue // the first workflow task may not have run yet
			}
			st.Channels = liveCounts(ctx, outcomes, st)
			for _, c := range st.Channels {
				if last[c.Channel] == c {
					continue
				}
				last[c.Channel] = c
				fmt.Fprintf(out, "%s %-12s %s\n", time.Now().Format("15:04:05"), c.Channel, progress(c))
			}
		}
	}
}

func progress(c models.ChannelCounts) string {
	return fmt.Sprintf("%d/%d done: committed=%d superseded=%d rejected=%d dead-lettered=%d deferred=%d requests=%d",
		c.Done(), c.Total, c.Committed, c.Superseded, c.Rejected, c.DeadLettered, c.Deferred, c.Requests)
}

func queryStatus(ctx context.Context, tc client.Client, wfID string) (models.BatchStatus, error) {
	var st models.BatchStatus
	v, err := tc.QueryWorkflow(ctx, wfID, "", models.QueryStatus)
	if err != nil {
		return st, fmt.Errorf("query %s: %w", wfID, err)
	}
	if err := v.Get(&st); err != nil {
		return st, fmt.Errorf("decode status of %s: %w", wfID, err)
	}
	return st, nil
}

// summary prints the per-channel table and returns errReported unless every update
// was committed or superseded.
func summary(st models.BatchStatus, out io.Writer) error {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "channel\ttotal\tcommitted\tsuperseded\trejected\tdead-lettered\tdeferred\trequests\t")
	rows := append(st.Channels, st.Totals())
	for _, c := range rows {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t\n", c.Channel, c.Total, c.Committed, c.Superseded,
			c.Rejected, c.DeadLettered, c.Deferred, c.Requests)
	}
	_ = tw.Flush()
	for _, r := range st.Rejected {
		fmt.Fprintf(out, "rejected %s (%s): %s\n", r.MutationID, r.Channel, models.ValidationError(r.Problems).Error())
	}
	t := st.Totals()
	if lost := t.Total - t.Done(); lost != 0 {
		fmt.Fprintf(out, "WARNING: %d updates without an outcome\n", lost)
	}
	if t.Rejected > 0 || t.DeadLettered > 0 || t.Total != t.Done() {
		return errReported
	}
	return nil
}
