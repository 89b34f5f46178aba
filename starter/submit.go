package main

import (
	"context"
	"fmt"
	"sort"

	"github.com/google/uuid"
	"github.com/spf13/cobra"

	"github.com/paritysync/paritysync/models"
	"github.com/paritysync/paritysync/ops"
)

// submitSize is how many mutations one submit stages (its update carries their
// reference).
const submitSize = models.MaxInlineMutations

func (c *cli) batchSubmitCmd() *cobra.Command {
	var file string
	cmd := &cobra.Command{
		Use:   "submit --file FILE",
		Short: "Hand mutations to the channels' burst smoothers",
		Long: `Hand the mutations in FILE to each channel's burst smoother (smoother/<channel>),
for a PMS that sends many small changes: the smoother gathers them into few batches.

When too many mutations already wait, the smoother refuses the submit (admission
control): the exit status is then 75 and the message says what was not sent; submit
those again later. Mutations for an unknown channel are reported and exit 3.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return c.batchSubmit(cmd.Context(), file) },
	}
	cmd.Flags().StringVarP(&file, "file", "f", "", "mutations: a JSON array or JSON lines (required)")
	required(cmd, "file")
	return cmd
}

// submitted is one accepted submit.
type submitted struct {
	Smoother string `json:"smoother"`
	Accepted int    `json:"accepted"`
	Pending  int    `json:"pending"`
}

func (c *cli) batchSubmit(ctx context.Context, file string) error {
	ms, d, err := c.readBatch(file)
	if err != nil {
		return err
	}
	defer d.close()
	// Every mutation gets its answer here: the smoother's batches record outcomes
	// under their own ids, which the PMS never sees. Rejected ones are not sent.
	v, err := ops.NewValidator(d.settings, d.channels)
	if err != nil {
		return err
	}
	if v, err = d.withStoredCodes(ctx, v, ms); err != nil {
		return err
	}
	byChannel := map[string][]models.Mutation{}
	var channels []string
	var unknown []models.Rejection
	for _, m := range ms {
		m.ApplyDefaults(uuid.NewString)
		if problems := v.Validate(m); len(problems) > 0 {
			// Answered now, per mutation, and never sent.
			unknown = append(unknown, models.Rejection{MutationID: m.ID, Channel: m.Channel, Problems: problems})
			continue
		}
		if _, ok := byChannel[m.Channel]; !ok {
			channels = append(channels, m.Channel)
		}
		byChannel[m.Channel] = append(byChannel[m.Channel], m)
	}
	sort.Strings(channels)
	var done []submitted
	report := func() error {
		if c.json() {
			return c.writeJSON(struct {
				Submitted []submitted        `json:"submitted"`
				Rejected  []models.Rejection `json:"rejected,omitempty"`
			}{done, unknown})
		}
		for _, s := range done {
			fmt.Fprintf(c.stdout, "%s: %d accepted, %d waiting\n", s.Smoother, s.Accepted, s.Pending)
		}
		for _, r := range unknown {
			fmt.Fprintf(c.stdout, "rejected %s: %s\n", r.MutationID, models.ValidationError(r.Problems).Error())
		}
		return nil
	}
	if len(channels) > 0 {
		if err := d.dial(ctx, useTemporal|useStore); err != nil {
			return err
		}
		for _, ch := range channels {
			queued := byChannel[ch]
			for len(queued) > 0 {
				part := queued[:min(submitSize, len(queued))]
				res, err := ops.Submit(ctx, d.tc, d.settings.TaskQueue, d.st, models.SmootherInput{Channel: ch}, part)
				if err != nil {
					_ = report()
					return submitError(fmt.Errorf("submit %d mutations to %s (%d more of that channel not sent): %w",
						len(part), models.SmootherWorkflowID(ch), len(queued)-len(part), err))
				}
				queued = queued[len(part):]
				done = append(done, submitted{models.SmootherWorkflowID(ch), res.Accepted, res.Pending})
			}
		}
	}
	if err := report(); err != nil {
		return err
	}
	if len(unknown) > 0 {
		return errReported
	}
	return nil
}

// submitError makes a smoother's admission refusal a refusedError (exit 75): the
// PMS submits again later; anything else stays an error.
func submitError(err error) error {
	if ops.IsSmootherFull(err) {
		return refusedError(err)
	}
	return err
}
