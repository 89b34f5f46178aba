package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shopspring/decimal"
	"github.com/stretchr/testify/require"

	"github.com/paritysync/paritysync/config"
	"github.com/paritysync/paritysync/dial/redistest"
	"github.com/paritysync/paritysync/limiter"
	"github.com/paritysync/paritysync/models"
)

// TestQuotaStopAnswers429WithRetryAfterUntilTheReset uses up expedia's daily quota
// in the limiter and posts changes for it: the answer is a 429 quota-exhausted
// problem whose Retry-After header, retry_after member and each refused change's
// retry_after are the time to the quota's reset (UTC midnight by the Redis
// clock), and whose per-change list names field and rule. Nothing reaches a
// smoother (the server has no Temporal client).
func TestQuotaStopAnswers429WithRetryAfterUntilTheReset(t *testing.T) {
	c := loadContract(t)
	rdb, prefix := redistest.Client(t, "paritysync-intake")
	srv := serverWith(t, writeKeys(t), rdb, prefix)
	ctx := context.Background()
	quota := srv.channels["expedia"].DailyQuota
	now, err := rdb.Time(ctx).Result()
	require.NoError(t, err)
	midnight := now.UTC().Truncate(24 * time.Hour).Add(24 * time.Hour)
	daily := prefix + "{expedia}:daily"
	require.NoError(t, rdb.Set(ctx, daily, quota, 0).Err())
	require.NoError(t, rdb.ExpireAt(ctx, daily, midnight).Err())

	body := "[" + mutationRow("q1", "expedia", 1) + "," +
		mutationRow("q2", "expedia", 2, `"room_type_code":"DBL"`, `"room_type_code":"TWN"`, `"version":2`, `"version":2,"priority":1`) + "]"
	resp := c.do(t, srv.Handler(), request(http.MethodPost, "/v1/changes", body), true)
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	p := decodeProblem(t, resp)
	require.Equal(t, problemBase+probQuota, p.Type)
	header, err := strconv.Atoi(resp.Header.Get("Retry-After"))
	require.NoError(t, err, "Retry-After is delta-seconds")
	want := int(midnight.Sub(now).Seconds())
	require.InDelta(t, want, header, 3, "Retry-After is the time to the quota's reset")
	require.Equal(t, header, p.RetryAfter)
	require.Len(t, p.Changes, 2)
	for _, ch := range p.Changes {
		require.Equal(t, changeRefused, ch.Status, "%+v", ch)
		require.Equal(t, header, ch.RetryAfter)
		require.Empty(t, ch.OutcomeURL)
		require.Len(t, ch.Problems, 1)
		require.Equal(t, "channel", ch.Problems[0].Field)
		require.Equal(t, ruleQuota, ch.Problems[0].Rule)
		require.Contains(t, ch.Problems[0].Detail, fmt.Sprintf("used %d of its %d daily requests (tier stop)", quota, quota))
	}
}

// TestBadInputAloneIs422NamingFieldAndRule posts bodies whose every row is bad in
// one way to POST /v1/batches: each is a 422 invalid-mutations problem naming the
// field and the rule; nothing is started (the server has no Temporal client).
func TestBadInputAloneIs422NamingFieldAndRule(t *testing.T) {
	c := loadContract(t)
	h := offlineServer(t).Handler()
	cases := []struct {
		name, body   string
		field, rule  string
		problemsWant int
	}{
		{"a 5 MB NDJSON line", `{"id":"big","property_id":"prop_0000abcd","note":"` + strings.Repeat("x", 5<<20) + `"}` + "\n",
			models.FieldMutation, models.RuleRowTooLong, 1},
		{"JPY with decimals", mutationRow("yen", "booking_com", 1, `"inventory":1`, `"amount":"1000.5","currency":"JPY"`) + "\n",
			"amount", models.RuleAmountPlaces, 1},
		{"KWD with four decimals", mutationRow("kwd", "booking_com", 1, `"inventory":1`, `"amount":"10.1234","currency":"KWD"`) + "\n",
			"amount", models.RuleAmountPlaces, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			req := request(http.MethodPost, "/v1/batches", tc.body)
			req.Header.Set("Content-Type", "application/x-ndjson")
			resp := c.do(t, h, req, false)
			require.Equal(t, http.StatusUnprocessableEntity, resp.StatusCode)
			p := decodeProblem(t, resp)
			require.Equal(t, problemBase+probInvalid, p.Type)
			require.Len(t, p.Problems, tc.problemsWant, "%+v", p.Problems)
			require.Equal(t, tc.field, p.Problems[0].Field)
			require.Equal(t, tc.rule, p.Problems[0].Rule)
			require.Equal(t, 1, p.Problems[0].Line)
		})
	}
}

// TestStoppedFamilyRefusesItsChanges stops expedia's availability as a
// quota_exhausted answer does: a change of availability is refused with the quota
// rule until the stop ends (nothing reaches a smoother: the server has no Temporal
// client), and GET /v1/quota reports the stop, with stop as the worst tier while
// the channel's own tier stays ok. TestStoppedFamilyHoldsOnlyItsOwnChanges shows
// that the other families are not held.
func TestStoppedFamilyRefusesItsChanges(t *testing.T) {
	c := loadContract(t)
	rdb, prefix := redistest.Client(t, "paritysync-intake")
	srv := serverWith(t, writeKeys(t), rdb, prefix)
	ctx := context.Background()
	const stop = 30 * time.Minute
	require.NoError(t, srv.lim.StopFamily(ctx, "expedia", models.FamilyAvailability, stop))

	body := "[" + mutationRow("s1", "expedia", 1) + "," +
		mutationRow("s2", "expedia", 2, `"inventory":2`, `"inventory":2,"amount":"100.00","currency":"EUR"`) + "]"
	resp := c.do(t, srv.Handler(), request(http.MethodPost, "/v1/changes", body), true)
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	p := decodeProblem(t, resp)
	require.Equal(t, problemBase+probQuota, p.Type)
	require.InDelta(t, stop.Seconds(), p.RetryAfter, 3, "retry after the family's stop")
	require.Len(t, p.Changes, 2)
	for _, ch := range p.Changes {
		require.Equal(t, changeRefused, ch.Status, "%+v", ch)
		require.Len(t, ch.Problems, 1)
		require.Equal(t, ruleQuota, ch.Problems[0].Rule)
		require.Contains(t, ch.Problems[0].Detail, "expedia stopped availability until ")
	}

	q := decodeJSON[struct {
		Worst    string `json:"worst_tier"`
		Channels []struct {
			Tier    string `json:"tier"`
			Stopped []struct {
				Family string `json:"family"`
			} `json:"stopped"`
		} `json:"channels"`
	}](t, c.do(t, srv.Handler(), request(http.MethodGet, "/v1/quota?channel=expedia", ""), true))
	require.Equal(t, "stop", q.Worst)
	require.Len(t, q.Channels, 1)
	require.Equal(t, "ok", q.Channels[0].Tier)
	require.Len(t, q.Channels[0].Stopped, 1)
	require.Equal(t, "availability", q.Channels[0].Stopped[0].Family)
}

// TestStoppedFamilyHoldsOnlyItsOwnChanges: admission holds a change when one of
// its families is stopped, and only then.
func TestStoppedFamilyHoldsOnlyItsOwnChanges(t *testing.T) {
	st := limiter.Status{Stopped: []limiter.FamilyStop{{Family: models.FamilyAvailability, For: time.Minute}}}
	inv, amount := 3, decimal.RequireFromString("100.00")
	rates := models.Mutation{Values: models.Values{Amount: &amount, Currency: "EUR"}}
	avail := models.Mutation{Values: models.Values{Inventory: &inv}}
	both := models.Mutation{Values: models.Values{Amount: &amount, Currency: "EUR", Inventory: &inv}}
	_, held := stoppedFamily(st, rates)
	require.False(t, held, "a rates change while availability is stopped")
	stop, held := stoppedFamily(st, avail)
	require.True(t, held)
	require.Equal(t, models.FamilyAvailability, stop.Family)
	_, held = stoppedFamily(st, both)
	require.True(t, held, "a change carrying a stopped family")
	_, held = stoppedFamily(limiter.Status{}, avail)
	require.False(t, held, "nothing stopped")
}

// TestPropertyBackoffRefusesItsChanges backs off one property's availability on a
// channel that limits per property, as a push's 429 does: a change of it is
// refused (429 channel-backoff, Retry-After the back-off's end, naming property
// and window; nothing reaches a smoother: the server has no Temporal client), and
// GET /v1/quota lists the back-off. The same property's rates, and another
// property's availability, are not held; a channel-wide back-off holds them all.
func TestPropertyBackoffRefusesItsChanges(t *testing.T) {
	c := loadContract(t)
	rdb, prefix := redistest.Client(t, "paritysync-intake")
	keys, err := newKeyring(writeKeys(t), nil)
	require.NoError(t, err)
	chs, err := config.LoadChannels("", func(k string) string {
		if k == "PARITYSYNC_CHANNEL_EXPEDIA_SCOPE" {
			return "property"
		}
		return ""
	})
	require.NoError(t, err)
	set := config.DefaultSettings()
	set.KeyPrefix = prefix
	srv, err := NewServer(Config{Settings: set, Channels: chs, MaxBatchBody: 8 << 20},
		nil, rdb, nil, keys, slog.New(slog.NewTextHandler(io.Discard, nil)))
	require.NoError(t, err)
	ctx := context.Background()
	const backoff = 30 * time.Second
	require.NoError(t, srv.lim.BackoffScope(ctx, "expedia", "prop_0000abcd", models.FamilyAvailability, backoff))

	resp := c.do(t, srv.Handler(), request(http.MethodPost, "/v1/changes", "["+mutationRow("b1", "expedia", 1)+"]"), true)
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	p := decodeProblem(t, resp)
	require.Equal(t, problemBase+probBackoff, p.Type)
	require.InDelta(t, backoff.Seconds(), p.RetryAfter, 2, "retry after the property's back-off")
	require.Len(t, p.Changes, 1)
	ch := p.Changes[0]
	require.Equal(t, changeRefused, ch.Status, "%+v", ch)
	require.Equal(t, ruleBackoff, ch.Problems[0].Rule)
	require.Contains(t, ch.Problems[0].Detail, "expedia's availability of prop_0000abcd backed off for ")

	q := decodeJSON[struct {
		Channels []struct {
			BackedOff int `json:"backed_off_properties"`
			Backoffs  []struct {
				Property string `json:"property_id"`
				Window   string `json:"window"`
			} `json:"property_backoffs"`
		} `json:"channels"`
	}](t, c.do(t, srv.Handler(), request(http.MethodGet, "/v1/quota?channel=expedia", ""), true))
	require.Len(t, q.Channels, 1)
	require.Equal(t, 1, q.Channels[0].BackedOff)
	require.Len(t, q.Channels[0].Backoffs, 1)
	require.Equal(t, "prop_0000abcd", q.Channels[0].Backoffs[0].Property)
	require.Equal(t, "availability", q.Channels[0].Backoffs[0].Window)

	inv, amount := 3, decimal.RequireFromString("100.00")
	ms := []models.Mutation{
		{PropertyID: "prop_0000abcd", Values: models.Values{Inventory: &inv}},
		{PropertyID: "prop_0000abcd", Values: models.Values{Amount: &amount, Currency: "EUR"}},
		{PropertyID: "prop_0000beef", Values: models.Values{Inventory: &inv}},
	}
	held, err := srv.backedOff(ctx, "expedia", 0, ms, []int{0, 1, 2})
	require.NoError(t, err)
	require.Greater(t, held[0].wait, backoff-2*time.Second)
	require.Equal(t, "prop_0000abcd", held[0].property)
	require.Zero(t, held[1].wait, "the property's rates are not backed off")
	require.Zero(t, held[2].wait, "another property's availability is not backed off")

	require.NoError(t, srv.lim.Backoff(ctx, "expedia", time.Minute))
	held, err = srv.backedOff(ctx, "expedia", time.Minute, ms, []int{0, 1, 2})
	require.NoError(t, err)
	for i, h := range held {
		require.Greater(t, h.wait, 50*time.Second, "change %d under the channel's back-off", i)
		require.Empty(t, h.property, "change %d is held by the channel's back-off, not a property's", i)
	}
}
