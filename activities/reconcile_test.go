package activities

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"go.temporal.io/sdk/testsuite"

	"github.com/paritysync/paritysync/channels"
	"github.com/paritysync/paritysync/models"
	"github.com/paritysync/paritysync/otasim/sim"
)

func TestDiffChannelFindsDriftAndStoresRepairs(t *testing.T) {
	t.Parallel() // waits on the read pace, on an environment of its own
	e := newActivityEnv(t, envOptions{})
	e.pushEach("b-applied",
		e.mutation("d-1", 3, 4, withRate("80.00")),
		e.mutation("d-2", 4, 4, func(m *models.Mutation) { m.Inventory = ptr(0) }),
	)
	// The channel answers 200 but applies nothing: only reading it back shows it.
	if err := e.sim.SetFaults(sim.Faults{DriftRatio: 1}); err != nil {
		t.Fatal(err)
	}
	lost := e.preparedChunk("b-lost", e.mutation("d-3", 6, 5, withRate("95.50")))
	if res, err := e.push(models.PushInput{BatchID: "b-lost", ChunkKey: lost.Key}); err != nil || res.Committed != 1 {
		t.Fatalf("push under drift: %+v, %v", res, err)
	}
	if err := e.sim.SetFaults(sim.Faults{}); err != nil {
		t.Fatal(err)
	}

	drift := e.diff("rc-1")
	if drift.Checked != 3 || drift.Drifted != 1 || drift.PayloadKey == "" {
		t.Fatalf("drift %+v, want 3 checked, 1 drifted, a payload", drift)
	}
	ms, err := e.store.LoadBatch(t.Context(), drift.PayloadKey)
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 1 {
		t.Fatalf("%d repair mutations, want 1", len(ms))
	}
	m := ms[0]
	if m.StayDate != e.today.AddDays(6) || m.Amount == nil || m.Amount.String() != "95.5" || m.Currency != "EUR" ||
		m.Version != 5 || !m.FullSync || m.Inventory != nil {
		t.Errorf("repair %+v does not restore the committed rate at its version", m)
	}
	m.ApplyDefaults(nil)
	if m.Priority != models.PriorityBulk {
		t.Errorf("a repaired rate is bulk work, got priority %d", m.Priority)
	}
}

// TestDiffChannelResendsAChannelWithoutReadBack: a channel configured with
// read_back false is not read (its protocol may have no read-back); every committed
// cell becomes a repair at its committed version instead.
func TestDiffChannelResendsAChannelWithoutReadBack(t *testing.T) {
	t.Parallel() // waits on the read pace, on an environment of its own
	e := newActivityEnv(t, envOptions{})
	e.pushEach("b-resend",
		e.mutation("r-1", 3, 4, withRate("80.00")),
		e.mutation("r-2", 4, 6, func(m *models.Mutation) { m.Inventory = ptr(2) }),
	)
	cfg := e.acts.Channels[testChannel]
	cfg.ReadBack = false
	e.acts.Channels[testChannel] = cfg
	// Any read would fail: nothing listens at this address.
	e.acts.Client = channels.New(nil, "http://127.0.0.1:1", e.acts.Tokens, []models.ChannelConfig{cfg}, time.Second)

	drift := e.diff("rs-1")
	if drift.Checked != 2 || drift.Resent != 2 || drift.Drifted != 0 || drift.PayloadKey == "" {
		t.Fatalf("drift %+v, want 2 checked and re-sent, none drifted, a payload", drift)
	}
	ms, err := e.store.LoadBatch(t.Context(), drift.PayloadKey)
	if err != nil {
		t.Fatal(err)
	}
	versions := map[int64]bool{}
	for _, m := range ms {
		versions[m.Version] = m.FullSync
	}
	if len(ms) != 2 || !versions[4] || !versions[6] {
		t.Errorf("repairs %+v, want both cells at their committed versions, as full syncs", ms)
	}
}

func TestDiffChannelOutsideTheWindowIsNotChecked(t *testing.T) {
	t.Parallel() // waits on the read pace, on an environment of its own
	e := newActivityEnv(t, envOptions{})
	e.pushEach("b-far", e.mutation("f-1", 40, 1, withRate("70.00")))
	drift := e.diff("rc-2")
	if drift.Checked != 0 || drift.Drifted != 0 || drift.PayloadKey != "" {
		t.Errorf("drift %+v, want nothing checked", drift)
	}
}

func TestHoldsComparesOnlyWhatTheLedgerSet(t *testing.T) {
	line := models.ARILine{Values: models.Values{StopSell: ptr(true)}}
	if !holds(models.FamilyRestrictions, line, models.ARICell{Values: models.Values{StopSell: ptr(true), MinLOS: ptr(3)}}) {
		t.Error("a restriction the ledger never set must not count as drift")
	}
	if holds(models.FamilyRestrictions, line, models.ARICell{}) {
		t.Error("a stop-sell the channel lost is drift")
	}
	if holds(models.FamilyRates, models.ARILine{Values: models.Values{Amount: decimalPtr("80.00"), Currency: "EUR"}}, models.ARICell{Values: models.Values{Amount: decimalPtr("80"), Currency: "USD"}}) {
		t.Error("a currency change is drift")
	}
	if !holds(models.FamilyRates, models.ARILine{Values: models.Values{Amount: decimalPtr("80.00"), Currency: "EUR"}}, models.ARICell{Values: models.Values{Amount: decimalPtr("80"), Currency: "EUR"}}) {
		t.Error("80.00 and 80 are the same price")
	}
}

func TestPrepareBatchResendSaltChangesEveryKey(t *testing.T) {
	e := newActivityEnv(t, envOptions{})
	m := e.mutation("s-1", 2, 1, withRate("100.00"))
	plain := e.chunkRequests(e.prepare(models.BatchSyncInput{BatchID: "b-plain", Mutations: []models.Mutation{m}}).Chunks[0])
	resent := e.chunkRequests(e.prepare(models.BatchSyncInput{BatchID: "b-resend", Mutations: []models.Mutation{m}, ResendSalt: "run-1"}).Chunks[0])
	if len(plain) != 1 || len(resent) != 1 {
		t.Fatalf("want one request each, got %d and %d", len(plain), len(resent))
	}
	if resent[0].KeySalt != "run-1" || plain[0].IdempotencyKey() == resent[0].IdempotencyKey() {
		t.Errorf("a re-send must carry a new idempotency key: salt %q", resent[0].KeySalt)
	}
}

func TestDiffChannelResumesAfterTheLastPropertyOfItsHeartbeat(t *testing.T) {
	t.Parallel() // waits on the read pace, on an environment of its own
	e := newActivityEnv(t, envOptions{})
	props := []string{"prop_1a2b3c4d", "prop_1a2b3c4e", "prop_1a2b3c4f"}
	// Each property's rate is pushed while the channel drops it: each has one drifted
	// cell, and one repair to store.
	if err := e.sim.SetFaults(sim.Faults{DriftRatio: 1}); err != nil {
		t.Fatal(err)
	}
	for i, p := range props {
		batch := fmt.Sprintf("b-r-%d", i)
		m := e.mutation(fmt.Sprintf("r-%d", i), 2, 1, withRate("90.00"))
		m.PropertyID = p
		c := e.preparedChunk(batch, m)
		if _, err := e.push(models.PushInput{BatchID: batch, ChunkKey: c.Key}); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.sim.SetFaults(sim.Faults{}); err != nil {
		t.Fatal(err)
	}

	// The first attempt reads every property and stores each one's repairs.
	in := models.DiffInput{Channel: testChannel, From: e.today, To: e.today.AddDays(29), BatchID: "rc-resume"}
	first, err := e.exec(e.acts.DiffChannel, in)
	if err != nil {
		t.Fatal(err)
	}
	var whole models.ChannelDrift
	if err := first.Get(&whole); err != nil {
		t.Fatal(err)
	}
	if whole.Reads != 3 || whole.Drifted != 3 {
		t.Fatalf("first attempt: %+v, want 3 reads, 3 drifted", whole)
	}

	// Its worker died when the heartbeat after the first property had reached the
	// server: the retry gets that heartbeat back, and finds the parts the first
	// attempt stored after it.
	p := diffProgress{After: props[0], Repairs: 1,
		Drift: models.ChannelDrift{Channel: testChannel, Checked: 1, Drifted: 1, Reads: 1}}
	second, err := e.execWith(e.acts.DiffChannel, in, func(env *testsuite.TestActivityEnvironment) {
		env.SetHeartbeatDetails(p)
	})
	if err != nil {
		t.Fatal(err)
	}
	var resumed models.ChannelDrift
	if err := second.Get(&resumed); err != nil {
		t.Fatal(err)
	}
	// Reads counts the heartbeat's one read and this attempt's: a property read twice
	// would make it 4.
	if resumed.Reads != 3 || resumed.Checked != whole.Checked || resumed.Drifted != 3 || resumed.PayloadKey == "" {
		t.Fatalf("resumed %+v, want the first attempt's counts %+v without reading %s again", resumed, whole, props[0])
	}
	ms, err := e.store.LoadBatch(t.Context(), resumed.PayloadKey)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range ms {
		got = append(got, m.PropertyID)
	}
	if !slices.Equal(got, props) {
		t.Errorf("repairs for %v, want one per property %v (parts replaced, not added)", got, props)
	}
}
