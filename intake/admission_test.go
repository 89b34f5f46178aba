package main

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/paritysync/paritysync/dial/redistest"
	"github.com/paritysync/paritysync/models"
)

// testRedis is the Redis at REDIS_URL (default the local one) and a key prefix of
// the test's own, whose keys are deleted at the end.
func testRedis(t *testing.T) (*redis.Client, string) {
	t.Helper()
	return redistest.Client(t, "paritysync-intake")
}

// TestQuotaStopAnswers429WithRetryAfterUntilTheReset uses up expedia's daily quota
// in the limiter and posts changes for it: the answer is a 429 quota-exhausted
// problem whose Retry-After header, retry_after member and each refused change's
// retry_after are the time to the quota's reset (UTC midnight by the Redis
// clock), and whose per-change list names field and rule. Nothing reaches a
// smoother (the server has no Temporal client).
func TestQuotaStopAnswers429WithRetryAfterUntilTheReset(t *testing.T) {
	c := loadContract(t)
	rdb, prefix := testRedis(t)
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
