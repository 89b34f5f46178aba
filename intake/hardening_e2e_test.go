package main

import (
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/paritysync/paritysync/models"
)

// TestHugeIDsDoNotBlockTheChannel replays the probe that used to block a
// channel: four posts at once, each one change with a 900,000-character id. Each
// is answered 202 with the change rejected on field id (nothing reaches the
// smoother), and a normal change posted right after to the same channel has its
// committed outcome. A tenant's change for its own property is committed too,
// and one for another tenant's property is rejected before it is recorded.
func TestHugeIDsDoNotBlockTheChannel(t *testing.T) {
	c, _, h := startAPI(t)
	var wg sync.WaitGroup
	answers := make([]changesAnswer, 4)
	for i := range answers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp := c.do(t, h, request(http.MethodPost, "/v1/changes", "["+hugeIDRow()+"]"), false)
			if resp.StatusCode == http.StatusAccepted {
				answers[i] = decodeJSON[changesAnswer](t, resp)
			}
		}()
	}
	wg.Wait()
	for i, a := range answers {
		require.Equal(t, 1, a.Rejected, "post %d: %+v", i, a)
		require.Equal(t, "id", a.Changes[0].Problems[0].Field)
	}

	posted := time.Now()
	resp := c.do(t, h, request(http.MethodPost, "/v1/changes", "["+mutationRow("after-huge", "expedia", 1)+"]"), true)
	require.Equal(t, http.StatusAccepted, resp.StatusCode)
	committed := func(key, id string) func() bool {
		return func() bool {
			out := decodeJSON[outcomeList](t, c.do(t, h, requestAs(key, http.MethodGet, "/v1/changes/"+id, ""), true))
			return len(out.Outcomes) == 1 && out.Outcomes[0].Outcome == models.OutcomeCommitted
		}
	}
	require.Eventually(t, committed(testKey, "after-huge"), time.Minute, 100*time.Millisecond)
	t.Logf("a normal change after four 900 KB-id posts had its outcome %s after it was posted", time.Since(posted).Round(10*time.Millisecond))

	own := mutationRow("beta-own", "expedia", 2, "prop_0000abcd", "prop_bbbc0001")
	other := mutationRow("beta-other", "expedia", 2)
	resp = c.do(t, h, requestAs(betaKey, http.MethodPost, "/v1/changes", "["+own+","+other+"]"), true)
	require.Equal(t, http.StatusAccepted, resp.StatusCode)
	ans := decodeJSON[changesAnswer](t, resp)
	require.Equal(t, changeAccepted, ans.Changes[0].Status)
	require.Equal(t, changeRejected, ans.Changes[1].Status)
	require.Equal(t, "property_id", ans.Changes[1].Problems[0].Field)
	require.Equal(t, ruleNotOwned, ans.Changes[1].Problems[0].Rule)
	require.Eventually(t, committed(betaKey, "beta-own"), time.Minute, 100*time.Millisecond)
	out := decodeJSON[outcomeList](t, c.do(t, h, requestAs(betaKey, http.MethodGet, "/v1/changes/beta-other", ""), true))
	require.Empty(t, out.Outcomes, "the refused change was never recorded")
}
