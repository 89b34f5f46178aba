package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"

	"github.com/paritysync/paritysync/models"
	"github.com/paritysync/paritysync/ops"
	"github.com/paritysync/paritysync/workflows"
)

// postConcurrently sends every body to POST /v1/changes at once (one goroutine
// each, released together) and returns the answers in the order of bodies; each
// request and answer is checked against openapi.yaml.
func postConcurrently(t *testing.T, c *contract, h http.Handler, bodies []string) []*http.Response {
	t.Helper()
	answers := make([]*http.Response, len(bodies))
	go1 := make(chan struct{})
	var wg sync.WaitGroup
	for i, body := range bodies {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req := request(http.MethodPost, "/v1/changes", body)
			<-go1
			answers[i] = c.do(t, h, req, true)
		}()
	}
	close(go1)
	wg.Wait()
	for i, a := range answers {
		require.NotNil(t, a, "post %d answered", i)
	}
	return answers
}

// smootherUpdates counts the submit updates channel's smoother accepted, from its
// history (a refused update leaves none).
func smootherUpdates(t *testing.T, tc client.Client, channel string) int {
	t.Helper()
	n := 0
	iter := tc.GetWorkflowHistory(context.Background(), models.SmootherWorkflowID(channel), "", false,
		enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for iter.HasNext() {
		ev, err := iter.Next()
		require.NoError(t, err)
		if ev.GetEventType() == enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED {
			n++
		}
	}
	return n
}

// waitOutcomes waits until every change in ids has its outcome at GET /v1/changes/{id}.
func waitOutcomes(t *testing.T, c *contract, h http.Handler, ids []string) {
	t.Helper()
	left := append([]string(nil), ids...)
	require.Eventually(t, func() bool {
		var still []string
		for _, id := range left {
			out := decodeJSON[outcomeList](t, c.do(t, h, request(http.MethodGet, "/v1/changes/"+id, ""), true))
			if len(out.Outcomes) != 1 || (out.Outcomes[0].Outcome != models.OutcomeCommitted && out.Outcomes[0].Outcome != models.OutcomeSuperseded) {
				still = append(still, id)
			}
		}
		left = still
		return len(left) == 0
	}, 2*time.Minute, 500*time.Millisecond, "every accepted change has its outcome")
}

// groupSizeOf reads channel's paritysync_intake_submit_group_size: how many
// updates were sent and how many changes they carried.
func groupSizeOf(t *testing.T, srv *Server, channel string) (count int, sum float64) {
	t.Helper()
	families, err := srv.registry.Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() != "paritysync_intake_submit_group_size" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "channel" && l.GetValue() == channel {
					return int(m.GetHistogram().GetSampleCount()), m.GetHistogram().GetSampleSum()
				}
			}
		}
	}
	t.Fatalf("no paritysync_intake_submit_group_size for %s", channel)
	return 0, 0
}

// TestConcurrentPostsToOneChannelGoInFewUpdates posts 40 single changes to one
// channel at once: all are accepted, the channel's submitter sends them to the
// smoother in far fewer updates (counted in the smoother's history and in
// paritysync_intake_submit_group_size, which agree), and every change gets its
// outcome.
func TestConcurrentPostsToOneChannelGoInFewUpdates(t *testing.T) {
	t.Parallel() // a namespace, task queue, key prefix and schema of its own
	c := loadContract(t)
	s := startStack(t)
	const posts = 40
	bodies, ids := make([]string, posts), make([]string, posts)
	for i := range posts {
		ids[i] = fmt.Sprintf("g%d", i)
		bodies[i] = "[" + mutationRow(ids[i], "booking_com", 1, `"room_type_code":"DBL"`, fmt.Sprintf(`"room_type_code":"G%d"`, i)) + "]"
	}
	for i, resp := range postConcurrently(t, c, s.api, bodies) {
		require.Equal(t, http.StatusAccepted, resp.StatusCode, "post %d", i)
		require.Equal(t, 1, decodeJSON[changesAnswer](t, resp).Accepted, "post %d", i)
	}

	updates := smootherUpdates(t, s.TC, "booking_com")
	t.Logf("%d posts went in %d updates", posts, updates)
	require.Positive(t, updates)
	require.LessOrEqual(t, updates, posts/4, "the posts were grouped into far fewer updates")
	count, sum := groupSizeOf(t, s.srv, "booking_com")
	require.Equal(t, updates, count, "the metric counts the updates the smoother took")
	require.Equal(t, float64(posts), sum, "and their changes")

	resp := c.do(t, s.api, httptest.NewRequest(http.MethodGet, "/metrics", nil), true)
	body := new(strings.Builder)
	_, _ = io.Copy(body, resp.Body)
	require.Contains(t, body.String(), `paritysync_intake_submit_group_size_count{channel="booking_com"} `+strconv.Itoa(updates))

	waitOutcomes(t, c, s.api, ids)
}

// TestConcurrentPostsAreAdmittedExactlyPerPost runs expedia's smoother with room
// for 20 changes (and a debounce long enough that nothing leaves it during the
// burst) and posts 30 posts of 1 to 3 changes (60 in all) at once: each post is
// accepted or refused whole, the accepted changes fill the room without passing
// it, every refusal is a smoother-full 429 with Retry-After, the smoother's batches
// carry exactly the accepted changes, and each of them gets its outcome.
func TestConcurrentPostsAreAdmittedExactlyPerPost(t *testing.T) {
	t.Parallel() // a namespace, task queue, key prefix and schema of its own
	c := loadContract(t)
	const room = 20
	s := startStack(t, func(cfg *Config) { cfg.SmootherMaxPending = room })
	_, err := s.TC.ExecuteWorkflow(context.Background(), client.StartWorkflowOptions{
		ID: models.SmootherWorkflowID("expedia"), TaskQueue: s.Queue,
	}, workflows.BurstSmoother, models.SmootherInput{Channel: "expedia", MaxPending: room, Debounce: 5 * time.Second})
	require.NoError(t, err)

	const posts = 30
	bodies := make([]string, posts)
	postIDs := make([][]string, posts)
	offered := 0
	for i := range posts {
		var rows []string
		for j := range 1 + i%3 {
			id := fmt.Sprintf("p%d-%d", i, j)
			postIDs[i] = append(postIDs[i], id)
			rows = append(rows, mutationRow(id, "expedia", 1, `"room_type_code":"DBL"`, fmt.Sprintf(`"room_type_code":"P%dX%d"`, i, j)))
		}
		offered += len(rows)
		bodies[i] = "[" + strings.Join(rows, ",") + "]"
	}
	var accepted []string
	refused := 0
	for i, resp := range postConcurrently(t, c, s.api, bodies) {
		switch resp.StatusCode {
		case http.StatusAccepted:
			ans := decodeJSON[changesAnswer](t, resp)
			require.Equal(t, len(postIDs[i]), ans.Accepted, "post %d is taken whole", i)
			accepted = append(accepted, postIDs[i]...)
		case http.StatusTooManyRequests:
			header, err := strconv.Atoi(resp.Header.Get("Retry-After"))
			require.NoError(t, err, "Retry-After is delta-seconds")
			require.Positive(t, header)
			p := decodeProblem(t, resp)
			require.Equal(t, problemBase+probSmootherFull, p.Type)
			require.Len(t, p.Changes, len(postIDs[i]))
			for _, ch := range p.Changes {
				require.Equal(t, changeRefused, ch.Status, "post %d is refused whole: %+v", i, ch)
				require.Equal(t, ruleSmootherFull, ch.Problems[0].Rule)
				require.Equal(t, header, ch.RetryAfter)
			}
			refused += len(postIDs[i])
		default:
			t.Fatalf("post %d answered %d", i, resp.StatusCode)
		}
	}
	t.Logf("%d changes offered: %d accepted, %d refused", offered, len(accepted), refused)
	require.Equal(t, offered, len(accepted)+refused, "every change is answered")
	require.LessOrEqual(t, len(accepted), room, "admission never passes the smoother's limit")
	require.GreaterOrEqual(t, len(accepted), room-2, "a refused post did not fit: the room left is smaller than any post")

	waitOutcomes(t, c, s.api, accepted)
	require.Eventually(t, func() bool {
		st, err := ops.SmootherStatus(context.Background(), s.TC, "expedia")
		require.NoError(t, err)
		return st.Totals.Committed+st.Totals.Superseded == len(accepted) && st.Pending == 0
	}, time.Minute, 250*time.Millisecond, "the smoother's batches carry exactly the accepted changes")
}
