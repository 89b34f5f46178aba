package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/client"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/paritysync/paritysync/e2e/stack"
	"github.com/paritysync/paritysync/models"
	"github.com/paritysync/paritysync/ops"
	"github.com/paritysync/paritysync/otasim/sample"
)

// maxSmootherPayload is the most bytes any payload of a smoother's history may
// take, whatever its admission limit (DESIGN.md: big work travels by reference).
const maxSmootherPayload = 256 << 10

// TestSmootherHoldsReferencesAtItsAdmissionLimit fills expedia's smoother to its
// default admission limit (5,000 waiting) with changes of the longest ids behind a
// batch the paused channel holds, has one more refused, terminates the held batch
// and checks that each of its changes has exactly one outcome in the store, that
// the smoother then continues as new with the 5,000 still waiting, and that no
// payload of either run's history (update inputs and results, activity inputs and
// results, child inputs, the continue-as-new input) exceeds 256 KB.
func TestSmootherHoldsReferencesAtItsAdmissionLimit(t *testing.T) {
	srv := parallelDevServer(t)
	s := startShortStack(t, srv, map[string]int{"expedia": 600})
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	require.NoError(t, s.Lim.Pause(ctx, "expedia", "held by the test"))

	limit := models.DefaultMaxPending
	batch := models.MaxInlineMutations
	ms := longChanges(t, "expedia", batch+limit+1)
	// A short history limit, so the run continues as new once the held batch ends.
	in := models.SmootherInput{Channel: "expedia", MaxHistory: 60}
	submit := func(part []models.Mutation) (models.SubmitResult, error) {
		return ops.Submit(ctx, s.TC, s.Queue, s.Acts.Store, in, part)
	}
	wfID := models.SmootherWorkflowID("expedia")

	// The first batch starts at once (a full batch waits for no debounce) and the
	// paused channel holds it, so everything after it waits.
	_, err := submit(ms[:batch])
	require.NoError(t, err)
	st := awaitSmoother(t, s.TC, wfID, func(st models.SmootherStatus) bool { return st.Running == 1 && st.Pending == 0 })
	held := st.LastBatch
	for i := batch; i < batch+limit; i += batch {
		res, err := submit(ms[i : i+batch])
		require.NoError(t, err)
		require.Equal(t, batch, res.Accepted)
	}
	st = awaitSmoother(t, s.TC, wfID, func(st models.SmootherStatus) bool { return st.Pending == limit })
	require.Equal(t, limit, st.MaxPending, "at the admission limit")
	_, err = submit(ms[batch+limit:])
	require.True(t, ops.IsSmootherFull(err), "one more is refused: %v", err)
	first := describeRun(t, s.TC, wfID)

	require.NoError(t, s.TC.TerminateWorkflow(ctx, models.BatchWorkflowID(held), "", "terminated by the test"))
	// The smoother closes the terminated batch's outcomes, then (its history past
	// MaxHistory, no batch running) continues as new with what waits, and the new
	// run starts the next batch.
	require.Eventually(t, func() bool { return describeRun(t, s.TC, wfID) != first }, 2*time.Minute, 200*time.Millisecond,
		"the smoother continues as new")
	st = awaitSmoother(t, s.TC, wfID, func(st models.SmootherStatus) bool { return st.Running == 1 })
	require.Equal(t, limit-batch, st.Pending, "the 5,000 waiting travelled on as counts; the next batch took 500")

	for _, m := range ms[:batch] {
		os, err := s.Acts.Store.Outcomes(ctx, held, m.ID)
		require.NoError(t, err)
		seen := map[models.Family]bool{}
		for _, o := range os {
			require.False(t, seen[o.Family], "%s has two outcomes for %s: %+v", m.ID, o.Family, os)
			seen[o.Family] = true
		}
		require.Len(t, os, len(m.Families()), "%s: one outcome per family, got %+v", m.ID, os)
	}

	runs := runHistories(t, s.TC, wfID)
	require.GreaterOrEqual(t, len(runs), 2)
	largest, where := 0, ""
	for i, h := range runs {
		n, w := largestPayload(h)
		t.Logf("run %d: %d events, largest payload %d B (%s)", i+1, len(h.Events), n, w)
		if n > largest {
			largest, where = n, w
		}
	}
	t.Logf("smoother at its admission limit (%d waiting, %d held in a batch): largest payload %d B in %s", limit, batch, largest, where)
	require.LessOrEqual(t, largest, maxSmootherPayload, "a payload of %d B in %s", largest, where)
	if recording() {
		// The run that took the submits, closed the terminated batch and continued as new.
		saveHistory(t, runs[len(runs)-2], "smoother_continued.json")
	}
	require.NoError(t, s.TC.TerminateWorkflow(ctx, wfID, "", "end of test"))
}

// TestSmootherClosesATerminatedBatch terminates a smoothed batch while it pushes
// (a slow channel: some of its changes committed, the rest not yet sent) and checks
// that every accepted change ends with exactly one outcome per family in the store:
// committed as the channel confirmed, cancelled by the smoother for the rest.
func TestSmootherClosesATerminatedBatch(t *testing.T) {
	srv := parallelDevServer(t)
	s := startStackWith(t, srv, stack.Options{Channels: map[string]stack.Channel{
		"booking_com": {PerMinute: 6, Burst: 2, MaxLines: 2}}, Window: testWindow})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	ms := longChanges(t, "booking_com", 40)
	wfID := models.SmootherWorkflowID("booking_com")
	in := models.SmootherInput{Channel: "booking_com", Debounce: 200 * time.Millisecond}
	res, err := ops.Submit(ctx, s.TC, s.Queue, s.Acts.Store, in, ms)
	require.NoError(t, err)
	require.Equal(t, len(ms), res.Accepted)
	st := awaitSmoother(t, s.TC, wfID, func(st models.SmootherStatus) bool { return st.Running == 1 })
	batchID := st.LastBatch
	require.Eventually(t, func() bool {
		p, err := s.Acts.Store.BatchProgress(ctx, batchID)
		if err != nil {
			return false
		}
		done := 0
		for _, c := range p.Channels {
			done += c.Committed
		}
		return done > 0
	}, 2*time.Minute, 100*time.Millisecond, "the batch commits its first requests")
	require.NoError(t, s.TC.TerminateWorkflow(ctx, models.BatchWorkflowID(batchID), "", "terminated by the test"))
	st = awaitSmoother(t, s.TC, wfID, func(st models.SmootherStatus) bool { return st.Running == 0 })

	byOutcome := map[models.Outcome]int{}
	for _, m := range ms {
		os, err := s.Acts.Store.Outcomes(ctx, batchID, m.ID)
		require.NoError(t, err)
		require.Len(t, os, len(m.Families()), "%s: one outcome per family, got %+v", m.ID, os)
		for _, o := range os {
			byOutcome[o.Outcome]++
		}
	}
	t.Logf("terminated batch %s: outcomes %v; smoother totals %+v", batchID, byOutcome, st.Totals)
	require.Positive(t, byOutcome[models.OutcomeCommitted], "some were sent before the termination")
	require.Positive(t, byOutcome[models.OutcomeCancelled], "the rest were closed by the smoother")
	require.Equal(t, len(ms), byOutcome[models.OutcomeCommitted]+byOutcome[models.OutcomeCancelled]+
		byOutcome[models.OutcomeSuperseded])
	require.NoError(t, s.TC.TerminateWorkflow(ctx, wfID, "", "end of test"))
}

// TestSmootherHistoryOf5000Changes submits 5,000 changes to one smoother, 20 a
// submit (intake's submitter sends groups of what posts gathered), and reads the
// smoother's history size as `temporal workflow describe` reports it: at most 1 MB.
func TestSmootherHistoryOf5000Changes(t *testing.T) {
	srv := parallelDevServer(t)
	s := startStackWith(t, srv, stack.Options{Channels: map[string]stack.Channel{
		"agoda": {PerMinute: 3000, Burst: 300, MaxLines: 100}}, Window: testWindow})
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	const total, per = 5000, 20
	ms := longChanges(t, "agoda", total)
	wfID := models.SmootherWorkflowID("agoda")
	accepted := 0
	for i := 0; i < total; i += per {
		for {
			res, err := ops.Submit(ctx, s.TC, s.Queue, s.Acts.Store, models.SmootherInput{Channel: "agoda"}, ms[i:i+per])
			if ops.IsSmootherFull(err) {
				time.Sleep(time.Second) // as a PMS told to retry later
				continue
			}
			require.NoError(t, err)
			accepted += res.Accepted
			break
		}
	}
	require.Equal(t, total, accepted)
	awaitSmoother(t, s.TC, wfID, func(st models.SmootherStatus) bool { return st.Pending == 0 })
	desc, err := s.TC.DescribeWorkflowExecution(ctx, wfID, "")
	require.NoError(t, err)
	current := desc.GetWorkflowExecutionInfo().GetHistorySizeBytes()
	runs := runHistories(t, s.TC, wfID)
	sum := 0
	for _, h := range runs {
		for _, e := range h.Events {
			sum += proto.Size(e)
		}
	}
	// What the Temporal CLI says, as an operator (or a check) reads it.
	out, err := exec.CommandContext(ctx, temporalCLI(t), "workflow", "describe", "--address", srv.FrontendHostPort(),
		"--namespace", srv.Namespace(), "--workflow-id", wfID, "--output", "json").Output()
	require.NoError(t, err)
	var described struct {
		Info struct {
			HistorySizeBytes string `json:"historySizeBytes"`
			HistoryLength    string `json:"historyLength"`
		} `json:"workflowExecutionInfo"`
	}
	require.NoError(t, json.Unmarshal(out, &described), "%s", out)
	t.Logf("5,000 changes in %d submits: temporal workflow describe: historySizeBytes %s (%s events); %d runs, %d B of events in all runs",
		total/per, described.Info.HistorySizeBytes, described.Info.HistoryLength, len(runs), sum)
	require.LessOrEqual(t, current, int64(1<<20), "the smoother's history exceeds 1 MB")
	cliSize, err := strconv.ParseInt(described.Info.HistorySizeBytes, 10, 64)
	require.NoError(t, err)
	require.LessOrEqual(t, cliSize, int64(1<<20), "the smoother's history exceeds 1 MB")
	require.NoError(t, s.TC.TerminateWorkflow(ctx, wfID, "", "end of test"))
}

// longChanges is n valid rate changes of channel, each with an id and a correlation
// id of the longest length allowed.
func longChanges(t *testing.T, channel string, n int) []models.Mutation {
	t.Helper()
	v, err := models.NewValidator(models.DefaultChannels(), "", time.Now)
	require.NoError(t, err)
	out := make([]models.Mutation, 0, n)
	today := models.DateOf(time.Now())
	for seed := uint64(1); len(out) < n; seed++ {
		for _, m := range sample.BatchFor(n, today, time.Now().UnixNano(), seed, []string{channel}) {
			if len(out) == n {
				break
			}
			if m.Amount == nil || m.Inventory != nil || m.StopSell != nil || len(v.Validate(m)) > 0 {
				continue
			}
			pad := fmt.Sprintf("%s-%d-%05d-", channel, seed, len(out))
			m.ID = pad + strings.Repeat("x", models.MaxMutationIDLength-len(pad))
			m.CorrelationID = strings.Repeat("c", models.MaxCorrelationIDLength)
			m.Priority = models.PriorityDefault
			require.Empty(t, v.Validate(m))
			out = append(out, m)
		}
	}
	return out
}

// awaitSmoother polls the smoother's status until ok holds.
func awaitSmoother(t *testing.T, tc client.Client, wfID string, ok func(models.SmootherStatus) bool) models.SmootherStatus {
	t.Helper()
	var st models.SmootherStatus
	require.Eventually(t, func() bool {
		v, err := tc.QueryWorkflow(context.Background(), wfID, "", models.QueryStatus)
		return err == nil && v.Get(&st) == nil && ok(st)
	}, 3*time.Minute, 200*time.Millisecond, "smoother status %+v", &st)
	return st
}

// largestPayload is the size of the largest payload anywhere in h (every
// temporal.api.common.v1.Payload in every event) and the event type holding it.
func largestPayload(h *historypb.History) (int, string) {
	best, where := 0, ""
	payload := (&commonpb.Payload{}).ProtoReflect().Descriptor().FullName()
	var walk func(m protoreflect.Message, event string)
	walk = func(m protoreflect.Message, event string) {
		if m.Descriptor().FullName() == payload {
			if n := proto.Size(m.Interface()); n > best {
				best, where = n, event
			}
			return
		}
		m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
			switch {
			case fd.IsList() && fd.Message() != nil:
				for i := range v.List().Len() {
					walk(v.List().Get(i).Message(), event)
				}
			case fd.IsMap() && fd.MapValue().Message() != nil:
				v.Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool {
					walk(mv.Message(), event)
					return true
				})
			case !fd.IsList() && !fd.IsMap() && fd.Message() != nil:
				walk(v.Message(), event)
			}
			return true
		})
	}
	for _, e := range h.Events {
		walk(e.ProtoReflect(), e.GetEventType().String())
	}
	return best, where
}
