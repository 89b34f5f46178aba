package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/paritysync/paritysync/activities/store"
	"github.com/paritysync/paritysync/intake/ops"
)

// Dead letters you can act on: export them, acknowledge them, replay them.

// dlqSelection is the dead letters a dlq command acts on.
type dlqSelection struct {
	channel, reason, batch, ids *string
	acked                       *bool
}

func dlqFlags(fs *flag.FlagSet) dlqSelection {
	return dlqSelection{
		channel: fs.String("channel", "", "only this channel"),
		reason:  fs.String("reason", "", "only this reason (rejected, auth, quota_exhausted, …)"),
		batch:   fs.String("batch", "", "only this batch"),
		ids:     fs.String("id", "", "only these entries (comma-separated ids)"),
		acked:   fs.Bool("acked", false, "include entries already acknowledged"),
	}
}

// load reads every selected dead letter, oldest first.
func (sel dlqSelection) load(ctx context.Context, st *store.Store) ([]store.DeadLetter, error) {
	if *sel.ids != "" {
		var out []store.DeadLetter
		for _, s := range strings.Split(*sel.ids, ",") {
			id, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
			if err != nil {
				return nil, usageError{fmt.Sprintf("--id: %q is not an entry id", s)}
			}
			d, err := st.DeadLetter(ctx, id)
			if err != nil {
				return nil, err
			}
			if d.AckedAt.IsZero() || *sel.acked {
				out = append(out, d)
			}
		}
		return out, nil
	}
	f := store.DeadLetterFilter{Channel: *sel.channel, Reason: *sel.reason, BatchID: *sel.batch, Acked: *sel.acked, Limit: 1000}
	var out []store.DeadLetter
	for {
		page, err := st.DeadLetters(ctx, f)
		if err != nil {
			return nil, err
		}
		out = append(out, page...)
		if len(page) < f.Limit {
			return out, nil
		}
		f.AfterID = page[len(page)-1].ID
	}
}

func dlqCommand(sub string, args []string, out io.Writer, getenv func(string) string) error {
	fs := flag.NewFlagSet("dlq "+sub, flag.ContinueOnError)
	sel := dlqFlags(fs)
	note := fs.String("note", "", "why (ack)")
	wait := fs.Bool("wait", false, "follow the replay batch until it ends (replay)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageError{"dlq " + sub + ": unexpected argument " + fs.Arg(0)}
	}
	d, err := loadDeps(getenv)
	if err != nil {
		return err
	}
	defer d.close()
	ctx := context.Background()
	st, err := d.store(ctx)
	if err != nil {
		return err
	}
	entries, err := sel.load(ctx, st)
	if err != nil {
		return err
	}
	switch sub {
	case "export":
		enc := json.NewEncoder(out)
		for _, e := range entries {
			if err := enc.Encode(e); err != nil {
				return err
			}
		}
		return nil
	case "ack":
		if *sel.ids == "" && *sel.channel == "" && *sel.reason == "" && *sel.batch == "" {
			return usageError{"dlq ack: select entries (--id, --channel, --reason or --batch)"}
		}
		n, err := st.AckDeadLetters(ctx, entryIDs(entries), *note)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "%d entries acknowledged\n", n)
		return nil
	}
	return dlqReplay(ctx, d, st, entries, *wait, out)
}

func entryIDs(entries []store.DeadLetter) []int64 {
	ids := make([]int64, len(entries))
	for i, e := range entries {
		ids[i] = e.ID
	}
	return ids
}

// dlqReplay re-sends the selected dead letters as one new batch and acknowledges
// them. Each parked update goes at the version it carried: the batch records it as
// desired, so one whose cell moved on to a newer version since is superseded and
// never sent (the newer one is the cell's desired state, sent by its own batch or by
// reconciliation). The batch re-sends content the channel may have seen, so it
// carries a fresh idempotency salt.
func dlqReplay(ctx context.Context, d *deps, st *store.Store, entries []store.DeadLetter, wait bool, out io.Writer) error {
	if len(entries) == 0 {
		fmt.Fprintln(out, "no dead letters selected")
		return nil
	}
	tc, err := d.temporal(ctx)
	if err != nil {
		return err
	}
	r, err := ops.ReplayDeadLetters(ctx, tc, d.settings.TaskQueue, st, "", entries)
	if err != nil {
		return err
	}
	batchID, wfID, run := r.BatchID, r.WorkflowID, r.Run
	fmt.Fprintf(out, "replaying %d entries (%d updates) as %s; %d acknowledged\n%s\n", r.Entries, r.Updates, wfID, r.Acked,
		d.uiLink(wfID))
	if !wait {
		return nil
	}
	final, err := follow(ctx, tc, run, out, d.outcomes(batchID))
	if err != nil {
		return err
	}
	return summary(final, out)
}
