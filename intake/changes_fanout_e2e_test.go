package main

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/paritysync/paritysync/activities/store"
	"github.com/paritysync/paritysync/models"
)

// TestChangesFanOutPerChannelAndCallBackOncePerPost maps prop_0000abcd to expedia
// and agoda over the API and posts webhook changes naming a callback URL: one for
// channel "*", one without a channel, one for booking_com and one for a property
// on no channel. The answer lists the fanned-out changes per channel (each with
// its own id and outcome URL), the unmapped one is rejected on field channel; each
// channel's change is committed apart. The receiver gets exactly one signed POST
// per post, once every accepted change has its outcome, carrying the answer and
// every outcome (a second post gets its own, one too). Every request, answer and
// callback body is checked against openapi.yaml.
func TestChangesFanOutPerChannelAndCallBackOncePerPost(t *testing.T) {
	t.Parallel()
	rc := &callbackReceiver{}
	recv := receiveCallbacks(t, rc)
	secret := testCallbackSecret
	c, _, h := startAPI(t, withCallbacks(t, recv.URL, secret))
	resp := c.do(t, h, request(http.MethodPut, "/v1/properties/prop_0000abcd/channels", `{"channels":["expedia","agoda"]}`), true)
	require.Equal(t, http.StatusOK, resp.StatusCode)

	postChanges := func(path string, rows ...string) *http.Response {
		t.Helper()
		q := ""
		if path != "" {
			q = "?callback_url=" + url.QueryEscape(recv.URL+path)
		}
		return c.do(t, h, request(http.MethodPost, "/v1/changes"+q, "["+strings.Join(rows, ",")+"]"), true)
	}
	resp = c.do(t, h, request(http.MethodPost, "/v1/changes?callback_url="+url.QueryEscape("https://elsewhere.example/x"),
		"["+mutationRow("w0", "expedia", 1)+"]"), true)
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	require.Equal(t, "callback_url", decodeProblem(t, resp).Field)

	resp = postChanges("/hooks/post",
		mutationRow("w1", "*", 2),
		mutationRow("w2", "*", 3, `"channel":"*",`, ``, `"room_type_code":"DBL"`, `"room_type_code":"R2"`),
		mutationRow("w3", "booking_com", 4),
		mutationRow("w4", "*", 5, "prop_0000abcd", "prop_0000ffff"))
	require.Equal(t, http.StatusAccepted, resp.StatusCode)
	ans := decodeJSON[changesAnswer](t, resp)
	require.Equal(t, 3, ans.Accepted)
	require.Equal(t, 1, ans.Rejected)
	require.NotEmpty(t, ans.CallbackEventID)
	for i, id := range []string{"w1", "w2"} {
		res := ans.Changes[i]
		require.Equal(t, id, res.ID)
		require.Equal(t, changeAccepted, res.Status)
		require.Len(t, res.Channels, 2, "%s answered per mapped channel", id)
		for k, ch := range []string{"agoda", "expedia"} {
			require.Equal(t, ch, res.Channels[k].Channel)
			require.Equal(t, id+"@"+ch, res.Channels[k].ID)
			require.Equal(t, changeAccepted, res.Channels[k].Status)
			require.Equal(t, "/v1/changes/"+id+"@"+ch, res.Channels[k].OutcomeURL)
		}
	}
	require.Empty(t, ans.Changes[2].Channels, "a change naming its channel is answered as before")
	require.Equal(t, "/v1/changes/w3", ans.Changes[2].OutcomeURL)
	require.Equal(t, changeRejected, ans.Changes[3].Status)
	require.Equal(t, "channel", ans.Changes[3].Problems[0].Field)

	second := decodeJSON[changesAnswer](t, postChanges("/hooks/second", mutationRow("w5", "expedia", 6, `"room_type_code":"DBL"`, `"room_type_code":"R5"`)))
	require.Equal(t, 1, second.Accepted)

	ids := []string{"w1@agoda", "w1@expedia", "w2@agoda", "w2@expedia", "w3"}
	for _, id := range ids {
		awaitCommitted(t, c, h, "/v1/changes/"+id, 2*time.Minute, "%s committed on its channel", id)
	}
	require.Eventually(t, func() bool { return len(rc.on("/hooks/post")) >= 1 && len(rc.on("/hooks/second")) >= 1 },
		time.Minute, 50*time.Millisecond, "each post's callback delivered")
	// The delivery loop polls every 50 ms: anything more would have come by now.
	time.Sleep(time.Second)
	require.Len(t, rc.on("/hooks/post"), 1, "exactly one callback per post")
	require.Len(t, rc.on("/hooks/second"), 1, "exactly one callback per post")

	check := func(g receivedCallback, eventID string) store.PostCompleted {
		t.Helper()
		require.Equal(t, eventID, g.eventID)
		require.Equal(t, signCallback([]byte(secret), g.timestamp, g.body), g.signature)
		ev := decodeCallback[store.PostCompleted](t, c, "ChangesCompleted", g.body)
		require.Equal(t, eventID, ev.EventID)
		require.Equal(t, store.EventChangesCompleted, ev.Type)
		return ev
	}
	ev := check(rc.on("/hooks/post")[0], ans.CallbackEventID)
	var got []string
	for _, o := range ev.Outcomes {
		require.Equal(t, models.OutcomeCommitted, o.Outcome, "%+v", o)
		got = append(got, o.MutationID)
	}
	require.ElementsMatch(t, ids, got, "every accepted change's outcome, under the PMS's ids")
	var answered changesAnswer
	require.NoError(t, json.Unmarshal(ev.Answer, &answered))
	require.Equal(t, ans, answered, "the callback carries the post's answer")
	ev = check(rc.on("/hooks/second")[0], second.CallbackEventID)
	require.Len(t, ev.Outcomes, 1)
	require.Equal(t, "w5", ev.Outcomes[0].MutationID)
}

// TestAFannedOutChangeIsAdmittedPerChannel: with smoothers admitting at most 2
// waiting changes, a post whose "*" change joins two others for expedia is refused
// whole on expedia (429, the "*" change's expedia answer refused) and accepted on
// agoda, which commits it; the refused row's status is refused. The post's
// callback still comes once, when agoda's change has its outcome.
func TestAFannedOutChangeIsAdmittedPerChannel(t *testing.T) {
	t.Parallel()
	rc := &callbackReceiver{}
	recv := receiveCallbacks(t, rc)
	c, _, h := startAPI(t, withCallbacks(t, recv.URL, testCallbackSecret), func(cfg *Config) { cfg.SmootherMaxPending = 2 })
	resp := c.do(t, h, request(http.MethodPut, "/v1/properties/prop_0000abcd/channels", `{"channels":["agoda","expedia"]}`), true)
	require.Equal(t, http.StatusOK, resp.StatusCode)

	body := "[" + strings.Join([]string{
		mutationRow("p1", "*", 1),
		mutationRow("p2", "expedia", 1, `"room_type_code":"DBL"`, `"room_type_code":"TWN"`),
		mutationRow("p3", "expedia", 1, `"room_type_code":"DBL"`, `"room_type_code":"STE"`),
	}, ",") + "]"
	resp = c.do(t, h, request(http.MethodPost, "/v1/changes?callback_url="+url.QueryEscape(recv.URL+"/hooks/p"), body), true)
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	p := decodeProblem(t, resp)
	require.Equal(t, problemBase+probSmootherFull, p.Type)
	require.NotEmpty(t, p.CallbackEventID)
	star := p.Changes[0]
	require.Equal(t, "p1", star.ID)
	require.Equal(t, changeRefused, star.Status)
	require.Equal(t, p.RetryAfter, star.RetryAfter)
	require.Len(t, star.Channels, 2)
	require.Equal(t, "agoda", star.Channels[0].Channel)
	require.Equal(t, changeAccepted, star.Channels[0].Status, "agoda's smoother has room")
	require.Equal(t, "/v1/changes/p1@agoda", star.Channels[0].OutcomeURL)
	require.Equal(t, "expedia", star.Channels[1].Channel)
	require.Equal(t, changeRefused, star.Channels[1].Status, "3 expedia changes do not fit under 2, refused whole")
	require.Equal(t, ruleSmootherFull, star.Channels[1].Problems[0].Rule)
	for _, ch := range p.Changes[1:] {
		require.Equal(t, changeRefused, ch.Status, "%+v", ch)
	}
	awaitCommitted(t, c, h, "/v1/changes/p1@agoda", 2*time.Minute, "the channel that took it commits it")
	require.Eventually(t, func() bool { return len(rc.on("/hooks/p")) >= 1 }, time.Minute, 50*time.Millisecond)
	time.Sleep(time.Second)
	got := rc.on("/hooks/p")
	require.Len(t, got, 1, "exactly one callback per post")
	require.Equal(t, p.CallbackEventID, got[0].eventID)
	var ev store.PostCompleted
	require.NoError(t, json.Unmarshal(got[0].body, &ev))
	require.Len(t, ev.Outcomes, 1)
	require.Equal(t, "p1@agoda", ev.Outcomes[0].MutationID)
}
