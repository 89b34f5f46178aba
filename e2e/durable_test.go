package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/paritysync/paritysync/activities/store"
	"github.com/paritysync/paritysync/models"
	"github.com/paritysync/paritysync/otasim/sample"
	"github.com/paritysync/paritysync/otasim/sim"
)

// The durable-state tests run the whole path with PostgreSQL as the system of record
// and otasim faults: a lost acknowledgement, a rate-limited reconciliation, Redis
// losing its state mid-batch, and a worker stopped mid-batch.

// loseRedis makes Redis restart empty, as far as this stack can tell: every key of
// the stack's prefix goes, and so does every function, which a Redis without
// persistence also forgets on restart (the limiter's decisions are a library of
// functions). The Redis is shared, so no other stack's keys are touched; the other
// tests' limiters lose their library too, and load it again, as after a restart.
func (s *e2eStack) loseRedis(t *testing.T) int {
	t.Helper()
	ctx := context.Background()
	keys, err := s.RDB.Keys(ctx, s.Prefix+"*").Result()
	require.NoError(t, err)
	if len(keys) > 0 {
		require.NoError(t, s.RDB.Del(ctx, keys...).Err())
	}
	require.NoError(t, s.RDB.FunctionFlush(ctx).Err())
	return len(keys)
}

// A push applied by the channel whose answer is lost (commit then 500) is
// dead-lettered; reconciliation then re-sends the desired, newer version instead
// of reverting the channel to the older acknowledged one. Its reads are paced by
// the limiter like pushes: against a channel that counts reads in its window, no
// 429 and no window over the limit.
func TestDurableLostAckReconciledWithPaidReads(t *testing.T) {
	srv := parallelDevServer(t)
	const channel, limit, properties = "booking_com", 10, 12
	s := startShortStack(t, srv, map[string]int{channel: limit})
	st := s.OpenStore(t)
	night := models.DateOf(time.Now()).AddDays(5)

	v1 := rateCells(channel, properties, night, 1, "80.00")
	b1 := waitBatch(t, s.startBatch(t, models.BatchSyncInput{BatchID: "lost-v1-" + uuid.NewString()[:8],
		Mutations: v1, Retry: models.DefaultRetryPolicy()}), 5*time.Minute)
	require.Equal(t, properties, b1.Totals().Committed)

	// v2 of the first property: applied, answer lost, dead-lettered at once.
	require.NoError(t, s.Sim.SetFaults(sim.Faults{Channels: []string{channel}, CommitThen500Ratio: 1}))
	v2 := rateCells(channel, 1, night, 2, "95.00")
	retry := models.DefaultRetryPolicy()
	retry.Attempts = 1
	b2 := waitBatch(t, s.startBatch(t, models.BatchSyncInput{BatchID: "lost-v2-" + uuid.NewString()[:8],
		Mutations: v2, Retry: retry}), 2*time.Minute)
	require.Equal(t, 1, b2.Totals().DeadLettered, "the lost answer is dead-lettered")
	require.NoError(t, s.Sim.SetFaults(sim.Faults{}))
	before := s.Sim.Stats()[channel]

	res := s.reconcile(t, "reconcile/e2e-lost-"+uuid.NewString()[:8], []string{channel})
	drift := res.Channels[0]
	after := s.Sim.Stats()[channel]
	t.Logf("reconcile: %+v; channel: %+v", drift, after)
	require.Equal(t, properties, drift.Checked)
	require.Equal(t, 1, drift.Unconfirmed, "the applied v2 without an answer")
	require.Zero(t, drift.Drifted)
	require.NotNil(t, drift.Repair)
	require.Equal(t, 1, drift.Repair.Totals().Committed)

	// The channel ends on the newer value, confirmed, and never saw v1 again.
	require.Zero(t, after.StaleReceived, "no older version was sent after a newer one")
	var cs store.CellState
	require.NoError(t, st.CellStates(context.Background(), channel, night, night, func(c store.CellState) error {
		if c.Cell.PropertyID == v2[0].PropertyID {
			cs = c
		}
		return nil
	}))
	require.Equal(t, int64(2), cs.Acked.Version)
	require.Equal(t, "95", cs.Acked.Amount.String())

	// Reads paid: one per property, counted by the channel in its window, no 429.
	require.Equal(t, properties, drift.Reads)
	require.Equal(t, properties, after.Reads-before.Reads)
	require.Zero(t, after.Throttled, "429s")
	require.LessOrEqual(t, after.MaxWindowRequests, limit)

	held := s.channelState(t, channel, v2[0].PropertyID, night)
	require.Len(t, held.Cells, 1)
	require.Equal(t, "95", held.Cells[0].Amount.String(), "the channel holds the newer value")
}

// channelState reads what the simulator holds for one property and night (after a
// test's limits are checked: it is a read like any other).
func (s *e2eStack) channelState(t *testing.T, channel, property string, night models.Date) models.ARIState {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, fmt.Sprintf("%s/%s/ari?property_id=%s&from=%s&to=%s",
		s.Env["PARITYSYNC_CHANNEL_URL"], channel, property, night, night), nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+s.Env["PARITYSYNC_TOKEN"])
	var resp *http.Response
	for range 30 {
		resp, err = http.DefaultClient.Do(req)
		require.NoError(t, err)
		if resp.StatusCode != http.StatusTooManyRequests {
			break
		}
		// The channel's window is full of the test's own traffic: wait for a slot.
		resp.Body.Close()
		time.Sleep(time.Second)
	}
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var st models.ARIState
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&st))
	return st
}

// Redis loses every key of the stack, and its functions, twice, 5 s apart, while a
// batch of 1,000 mutations runs: the batch finishes, every update has its outcome, the channels
// hold the final values, no older version follows a newer one, and no 60 s window
// holds more than the limit plus one burst.
func TestDurableRedisLossMidBatch(t *testing.T) {
	srv := parallelDevServer(t)
	limits := map[string]int{"booking_com": 12, "expedia": 12, "agoda": 12}
	const burst = 2 // startShortStack: max(2, limit/10)
	s := startShortStack(t, srv, limits)
	st := s.OpenStore(t)
	ms := sample.Batch(1000, models.DateOf(time.Now()), time.Now().Unix(), 3)
	batchID := "redis-loss-" + uuid.NewString()[:8]
	key, err := st.SaveBatch(context.Background(), batchID, ms)
	require.NoError(t, err)
	started := time.Now()
	run := s.startBatch(t, models.BatchSyncInput{BatchID: batchID, PayloadKey: key, Retry: models.DefaultRetryPolicy()})

	accepted := func() int {
		n := 0
		for _, c := range s.Sim.Stats() {
			n += c.Accepted
		}
		return n
	}
	require.Eventually(t, func() bool { return accepted() >= 10 }, 3*time.Minute, 200*time.Millisecond)
	lostAt := accepted()
	first := s.loseRedis(t)
	time.Sleep(testWindow / 12) // 5 s of a 60 s window: both losses within one window
	second := s.loseRedis(t)
	t.Logf("Redis lost %d keys after %d accepted pushes, and %d keys %s later", first, lostAt, second, testWindow/12)

	bs := waitBatch(t, run, 10*time.Minute)
	took := time.Since(started)
	// The library is there again: a decision that finds none loads it.
	libs, err := s.RDB.FunctionList(context.Background(), redis.FunctionListQuery{LibraryNamePattern: "paritysync_*"}).Result()
	require.NoError(t, err)
	require.NotEmpty(t, libs, "the limiter's library, loaded again after the loss")
	total := bs.Totals()
	stored := storedTotal(t, st, batchID)
	t.Logf("batch in %s: %+v; stored outcomes %+v", took.Round(time.Second), total, stored)
	require.True(t, bs.Done)
	want := expectedUpdates(t, ms)
	require.Equal(t, want, total.Total)
	require.Equal(t, want, total.Done(), "every update has an outcome")
	require.Equal(t, want, stored.Total, "every update's outcome is in the store, once")
	require.Zero(t, total.DeadLettered)
	for slug, cs := range s.Sim.Stats() {
		t.Logf("%s: %+v", slug, cs)
		require.Zero(t, cs.StaleReceived, "%s received an older version after a newer one", slug)
		require.LessOrEqual(t, cs.MaxWindowRequests, limits[slug]+burst, "%s: most requests in one window", slug)
	}

	// The channels hold the final values: nothing drifted, nothing unconfirmed.
	res := s.reconcile(t, "reconcile/e2e-redis-loss-"+uuid.NewString()[:8], []string{"agoda", "booking_com", "expedia"})
	for _, c := range res.Channels {
		t.Logf("reconcile %s: checked %d drifted %d unconfirmed %d reads %d", c.Channel, c.Checked, c.Drifted, c.Unconfirmed, c.Reads)
		require.Positive(t, c.Checked)
		require.Zero(t, c.Drifted, c.Channel)
		require.Zero(t, c.Unconfirmed, c.Channel)
	}
}

// The worker stops mid-batch without letting its activities finish (PostgreSQL
// writes in flight are cancelled or their answers lost); a new worker takes over.
// The batch ends with exactly one outcome per update: none twice, none missing.
func TestDurableWorkerStoppedMidBatch(t *testing.T) {
	srv := parallelDevServer(t)
	s := startStack(t, srv, map[string]int{"booking_com": 60, "expedia": 60, "agoda": 60}, func(env map[string]string) {
		// No grace: in-flight activities are cancelled when the worker stops.
		env["PARITYSYNC_SHUTDOWN_TIMEOUT"] = "1ms"
	})
	st := s.OpenStore(t)
	ms := sample.Batch(400, models.DateOf(time.Now()), time.Now().Unix(), 5)
	batchID := "worker-stop-" + uuid.NewString()[:8]
	run := s.startBatch(t, models.BatchSyncInput{BatchID: batchID, Mutations: ms, Retry: models.DefaultRetryPolicy()})

	require.Eventually(t, func() bool {
		n := 0
		for _, c := range s.Sim.Stats() {
			n += c.Accepted
		}
		return n >= 8
	}, 3*time.Minute, 50*time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	require.NoError(t, s.App.Stop(ctx))
	cancel()
	mid := storedTotal(t, st, batchID)
	t.Logf("worker stopped with %d outcomes recorded", mid.Total)
	s.StartWorker(t)

	bs := waitBatch(t, run, 10*time.Minute)
	total := bs.Totals()
	stored := storedTotal(t, st, batchID)
	t.Logf("batch: %+v; stored outcomes %+v", total, stored)
	want := expectedUpdates(t, ms)
	require.Equal(t, want, total.Total)
	require.Equal(t, want, total.Done(), "every update has an outcome")
	require.Equal(t, want, stored.Total, "one stored outcome per update: none twice, none missing")
	require.Equal(t, total.Committed, stored.Committed)
	require.Equal(t, total.Superseded, stored.Superseded)
	require.Equal(t, total.Rejected, stored.Rejected)
	require.Equal(t, total.DeadLettered, stored.DeadLettered)
	for slug, cs := range s.Sim.Stats() {
		require.Zero(t, cs.StaleReceived, slug)
	}
}
