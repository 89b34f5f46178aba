package activities

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/paritysync/paritysync/limiter"
	"github.com/paritysync/paritysync/models"
	"github.com/paritysync/paritysync/otasim/sim"
)

// loseRedis deletes every key of the test's prefix: Redis restarted empty, as far
// as this worker can tell (the Redis is shared).
func (e *activityEnv) loseRedis() {
	e.t.Helper()
	ctx := context.Background()
	keys, err := e.rdb.Keys(ctx, e.prefix+"*").Result()
	if err != nil {
		e.t.Fatal(err)
	}
	if len(keys) > 0 {
		if err := e.rdb.Del(ctx, keys...).Err(); err != nil {
			e.t.Fatal(err)
		}
	}
}

func TestGateRebuiltFromTheStoreAfterRedisLoss(t *testing.T) {
	t.Parallel()
	e := newActivityEnv(t, envOptions{})
	// Both prepared before either is sent, so the older one is not dropped as stale
	// when prepared: only the gate can keep it out.
	older := e.preparedChunk("b-old", e.mutation("o-1", 3, 5, withRate("80.00")))
	newer := e.preparedChunk("b-new", e.mutation("n-1", 3, 6, withRate("95.00")))
	if res, err := e.push(models.PushInput{BatchID: "b-new", ChunkKey: newer.Key, Reservation: "b-new/0"}); err != nil || res.Committed != 1 {
		t.Fatalf("newer: %+v, %v", res, err)
	}
	e.loseRedis()
	res, err := e.push(models.PushInput{BatchID: "b-old", ChunkKey: older.Key, Reservation: "b-old/0"})
	if err != nil || res.Superseded != 1 {
		t.Fatalf("older after the loss: %+v, %v; want superseded by the rebuilt gate", res, err)
	}
	st := e.sim.Stats()[testChannel]
	if st.Requests != 1 || st.StaleReceived != 0 {
		t.Fatalf("simulator saw %d requests, %d stale; want 1 and 0", st.Requests, st.StaleReceived)
	}
	if epoch, _ := e.lim.GateEpoch(context.Background(), testChannel); epoch == "" {
		t.Error("no gate epoch after the rebuild")
	}
	outs, err := e.store.Outcomes(context.Background(), "b-old", "o-1")
	if err != nil || len(outs) != 1 || outs[0].Outcome != models.OutcomeSuperseded {
		t.Errorf("outcome of the older update %+v, %v; want superseded", outs, err)
	}
}

func TestPrepareBatchRetryRecordsOutcomesOnce(t *testing.T) {
	t.Parallel()
	e := newActivityEnv(t, envOptions{})
	ms := []models.Mutation{
		e.mutation("r-1", 3, 2, withRate("90.00")),
		e.mutation("r-old", 3, 1, withRate("80.00")),
		e.mutation("", 4, 1, func(m *models.Mutation) { m.PropertyID = "bad" }),
	}
	in := models.BatchSyncInput{BatchID: "b-twice", Mutations: ms}
	first, second := e.prepare(in), e.prepare(in)
	if len(first.Decided) != 1 || first.Decided[0] != second.Decided[0] {
		t.Fatalf("decided %+v then %+v, want the same tallies", first.Decided, second.Decided)
	}
	counts, err := e.store.BatchCounts(context.Background(), "b-twice")
	if err != nil {
		t.Fatal(err)
	}
	if len(counts) != 1 || counts[0].Total != 2 || counts[0].Rejected != 1 || counts[0].Superseded != 1 {
		t.Errorf("stored %+v, want one rejection and one superseded, once each", counts)
	}
}

func TestDiffChannelRepairsALostAcknowledgementAtTheNewerVersion(t *testing.T) {
	t.Parallel() // waits on the read pace, on an environment of its own
	e := newActivityEnv(t, envOptions{})
	v1 := e.preparedChunk("b-v1", e.mutation("l-1", 5, 1, withRate("80.00")))
	if _, err := e.push(models.PushInput{BatchID: "b-v1", ChunkKey: v1.Key}); err != nil {
		t.Fatal(err)
	}
	// v2 is applied but its answer is lost: the push is a 5xx.
	if err := e.sim.SetFaults(sim.Faults{CommitThen500Ratio: 1}); err != nil {
		t.Fatal(err)
	}
	v2 := e.preparedChunk("b-v2", e.mutation("l-2", 5, 2, withRate("95.00")))
	_, err := e.push(models.PushInput{BatchID: "b-v2", ChunkKey: v2.Key})
	failureOf(t, err, models.ErrTransient)
	if err := e.sim.SetFaults(sim.Faults{}); err != nil {
		t.Fatal(err)
	}
	// Cells never acknowledged are checked too.
	e.preparedChunk("b-never", e.mutation("l-3", 6, 1, func(m *models.Mutation) { m.Inventory = ptr(3) }))

	drift := e.diff("rc-lost")
	if drift.Checked != 2 || drift.Unconfirmed != 1 || drift.Drifted != 1 || drift.Reads != 1 {
		t.Fatalf("drift %+v, want 2 checked: 1 unconfirmed (v2 applied, answer lost), 1 drifted (never sent), 1 read", drift)
	}
	ms, err := e.store.LoadBatch(context.Background(), drift.PayloadKey)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		if m.StayDate == e.today.AddDays(5) && (m.Version != 2 || m.Amount.String() != "95") {
			t.Errorf("repair %+v: want the desired v2 at 95.00, never the acknowledged v1", m)
		}
	}
	if len(ms) != 2 {
		t.Errorf("%d repairs, want 2", len(ms))
	}
}

func TestDiffChannelReadsPayTheLimiter(t *testing.T) {
	t.Parallel() // waits on the read pace, on an environment of its own
	e := newActivityEnv(t, envOptions{})
	var ms []models.Mutation
	for i, p := range []string{"prop_00000001", "prop_00000002", "prop_00000003"} {
		m := e.mutation("rd-"+p, 3+i, 1, withRate("70.00"))
		m.PropertyID = p
		ms = append(ms, m)
	}
	e.pushEach("b-pay", ms...)
	before := e.limiterStatus()
	drift := e.diff("rc-pay")
	after := e.limiterStatus()
	if drift.Reads != 3 || after.InWindow-before.InWindow != 3 || after.DailyUsed-before.DailyUsed != 3 {
		t.Errorf("%d reads took %d slots and %d quota, want 3 each", drift.Reads, after.InWindow-before.InWindow,
			after.DailyUsed-before.DailyUsed)
	}
	if st := e.sim.Stats()[testChannel]; st.Reads != 3 || st.Throttled != 0 {
		t.Errorf("simulator: %d reads, %d throttled; want 3 and 0", st.Reads, st.Throttled)
	}
}

func TestPushRequestFamilyWithoutBudgetIsRejectedNotRetried(t *testing.T) {
	t.Parallel()
	e := newActivityEnv(t, envOptions{})
	chunk := e.preparedChunk("b-nobudget", e.mutation("nb-1", 3, 1, withRate("80.00")))
	cfg := e.acts.Channels[testChannel]
	cfg.Shares.Rates = 0
	e.lim = limiter.New(e.rdb, []models.ChannelConfig{cfg}, limiter.Options{Prefix: e.prefix})
	e.acts.Limiter = e.lim
	_, err := e.push(models.PushInput{BatchID: "b-nobudget", ChunkKey: chunk.Key})
	if f := failureOf(t, err, models.ErrRejected); !strings.Contains(f.Message, limiter.ErrNoBudget.Error()) {
		t.Errorf("failure %+v, want the limiter's reason", f)
	}
	if n := e.simRequests(); n != 0 {
		t.Errorf("simulator saw %d requests", n)
	}
}

// A quota_exhausted answer stops the family it came from until the reset: further
// requests of that family wait in the limiter (the channel sees no more of them),
// while the channel's other families still go.
func TestQuotaExhaustedStopsTheFamilyUntilTheReset(t *testing.T) {
	t.Parallel()
	e := newActivityEnv(t, envOptions{simChannel: func(c *models.ChannelConfig) { c.DailyQuota = 1 }})
	first := e.preparedChunk("b-q1", e.mutation("q-1", 3, 1, withRate("80.00")))
	second := e.preparedChunk("b-q2", e.mutation("q-2", 4, 1, withRate("80.00")))
	third := e.preparedChunk("b-q3", e.mutation("q-3", 5, 1, withRate("80.00")))
	avail := e.preparedChunk("b-q4", e.mutation("q-4", 5, 1, func(m *models.Mutation) { m.Inventory = ptr(3) }))
	if _, err := e.push(models.PushInput{BatchID: "b-q1", ChunkKey: first.Key}); err != nil {
		t.Fatalf("first push spends the quota: %v", err)
	}
	_, err := e.push(models.PushInput{BatchID: "b-q2", ChunkKey: second.Key})
	f := failureOf(t, err, models.ErrQuotaExhausted)
	st := e.limiterStatus()
	if len(st.Stopped) != 1 || st.Stopped[0].Family != models.FamilyRates {
		t.Fatalf("stopped %+v, want rates only", st.Stopped)
	}
	if f.Wait <= 0 || f.Wait > 24*time.Hour || st.Stopped[0].For > f.Wait+time.Second || st.PausedFor != 0 {
		t.Fatalf("wait %s, rates stopped for %s, channel back-off %s: want the family stopped until the quota resets, the channel not backed off",
			f.Wait, st.Stopped[0].For, st.PausedFor)
	}
	// Every further rates request waits in the limiter: the channel sees no more.
	_, err = e.push(models.PushInput{BatchID: "b-q3", ChunkKey: third.Key})
	if g := failureOf(t, err, models.ErrQuotaExhausted); g.Wait <= 0 || !strings.Contains(g.Message, "rates stopped") {
		t.Errorf("rates after the stop: %+v, want a wait for the family's stop", g)
	}
	if got := e.sim.Stats()[testChannel]; got.Requests != 2 || got.QuotaExhausted != 1 {
		t.Errorf("simulator saw %d requests, %d quota refusals; want 2 and 1", got.Requests, got.QuotaExhausted)
	}
	// Availability is not stopped: it reaches the channel (whose own quota, in
	// this simulator, is channel-wide, so it is refused there and stopped in turn).
	_, err = e.push(models.PushInput{BatchID: "b-q4", ChunkKey: avail.Key})
	failureOf(t, err, models.ErrQuotaExhausted)
	if got := e.sim.Stats()[testChannel].Requests; got != 3 {
		t.Errorf("simulator saw %d requests, want 3 (the availability push went)", got)
	}
}
