package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"sort"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/paritysync/paritysync/models"
	"github.com/paritysync/paritysync/workflows"
)

// submitSize is how many mutations one submit update carries.
const submitSize = models.MaxInlineMutations

// batchSubmit hands mutations to the channels' burst smoothers, for a PMS that sends
// many small changes: the smoother gathers them into few batches and refuses them,
// to be retried, when too many are already waiting.
func batchSubmit(args []string, out io.Writer, getenv func(string) string) error {
	fs := flag.NewFlagSet("batch submit", flag.ContinueOnError)
	file := fs.String("file", "", "mutations: a JSON array or JSON lines")
	asJSON := fs.Bool("json", false, "answer per mutation as JSON lines (accepted, or rejected with its problems)")
	ms, err := readFileFlag(fs, file, args)
	if err != nil {
		return err
	}
	d, err := loadDeps(getenv)
	if err != nil {
		return err
	}
	defer d.close()
	// Every mutation gets its answer here: the smoother's batches record outcomes
	// under their own ids, which the PMS never sees. Rejected ones are not sent.
	v, err := models.NewValidator(d.channels, d.settings.PropertyPattern, time.Now)
	if err != nil {
		return err
	}
	answers := newSubmitAnswers(out, *asJSON)
	byChannel := map[string][]models.Mutation{}
	var channels []string
	unknown := 0
	for _, m := range ms {
		if problems := v.Validate(m); len(problems) > 0 {
			answers.rejected(m, problems)
			unknown++
			continue
		}
		if _, ok := byChannel[m.Channel]; !ok {
			channels = append(channels, m.Channel)
		}
		byChannel[m.Channel] = append(byChannel[m.Channel], m)
	}
	sort.Strings(channels)
	ctx := context.Background()
	tc, err := d.temporal(ctx)
	if err != nil {
		return err
	}
	for _, ch := range channels {
		queued := byChannel[ch]
		for len(queued) > 0 {
			part := queued[:min(submitSize, len(queued))]
			res, err := submit(ctx, tc, d.settings.TaskQueue, ch, part)
			if err != nil {
				return fmt.Errorf("submit %d mutations to %s (%d more not sent): %w", len(part), models.SmootherWorkflowID(ch), len(queued)-len(part), err)
			}
			queued = queued[len(part):]
			answers.accepted(part)
			if !*asJSON {
				fmt.Fprintf(out, "%s: %d accepted, %d waiting\n", models.SmootherWorkflowID(ch), res.Accepted, res.Pending)
			}
		}
	}
	if unknown > 0 {
		return errReported
	}
	return nil
}

// submitAnswer is what batch submit says of one mutation.
type submitAnswer struct {
	ID       string              `json:"id"`
	Channel  string              `json:"channel"`
	Status   string              `json:"status"` // accepted | rejected
	Problems []models.FieldError `json:"problems,omitempty"`
}

// submitAnswers prints per-mutation answers: every rejection with its problems,
// and, as JSON lines, every acceptance too.
type submitAnswers struct {
	out    io.Writer
	asJSON bool
	enc    *json.Encoder
}

func newSubmitAnswers(out io.Writer, asJSON bool) *submitAnswers {
	return &submitAnswers{out: out, asJSON: asJSON, enc: json.NewEncoder(out)}
}

func (a *submitAnswers) rejected(m models.Mutation, problems []models.FieldError) {
	if a.asJSON {
		_ = a.enc.Encode(submitAnswer{ID: m.ID, Channel: m.Channel, Status: "rejected", Problems: problems})
		return
	}
	fmt.Fprintf(a.out, "rejected %s (%s): %s\n", m.ID, m.Channel, models.ValidationError(problems).Error())
}

func (a *submitAnswers) accepted(ms []models.Mutation) {
	if !a.asJSON {
		return
	}
	for _, m := range ms {
		_ = a.enc.Encode(submitAnswer{ID: m.ID, Channel: m.Channel, Status: "accepted"})
	}
}

// submit sends one submit update, starting the channel's smoother if it is not running.
func submit(ctx context.Context, tc client.Client, queue, channel string, ms []models.Mutation) (models.SubmitResult, error) {
	start := tc.NewWithStartWorkflowOperation(client.StartWorkflowOptions{
		ID: models.SmootherWorkflowID(channel), TaskQueue: queue,
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
		TypedSearchAttributes: temporal.NewSearchAttributes(
			temporal.NewSearchAttributeKeyKeyword(models.SearchAttrChannel).ValueSet(channel)),
	}, workflows.BurstSmoother, models.SmootherInput{Channel: channel})
	h, err := tc.UpdateWithStartWorkflow(ctx, client.UpdateWithStartWorkflowOptions{
		StartWorkflowOperation: start,
		UpdateOptions: client.UpdateWorkflowOptions{
			UpdateName: models.UpdateSubmit, Args: []any{ms}, WaitForStage: client.WorkflowUpdateStageCompleted,
		},
	})
	var res models.SubmitResult
	if err == nil {
		err = h.Get(ctx, &res)
	}
	return res, err
}
