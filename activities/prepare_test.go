package activities

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/shopspring/decimal"

	"github.com/paritysync/paritysync/activities/store"
	"github.com/paritysync/paritysync/models"
)

func TestPrepareBatchRejectsWithFieldProblems(t *testing.T) {
	t.Parallel()
	e := newActivityEnv(t, envOptions{})
	bad := e.mutation("mut-bad", 3, 1, func(m *models.Mutation) {
		m.PropertyID = "hotel-1"
		m.Amount, m.Currency = decimalPtr("99.999"), "EUR"
	})
	past := e.mutation("mut-past", -2, 1, func(m *models.Mutation) { m.Inventory = ptr(4) })
	good := e.mutation("mut-good", 3, 1, withRate("120.00"))
	plan := e.prepare(models.BatchSyncInput{BatchID: "b-reject", Mutations: []models.Mutation{bad, good, past}})

	if plan.Mutations != 3 {
		t.Errorf("plan.Mutations = %d, want 3", plan.Mutations)
	}
	if len(plan.Rejected) != 2 {
		t.Fatalf("rejected %+v, want mut-bad and mut-past", plan.Rejected)
	}
	byID := map[string]models.ValidationError{}
	for _, r := range plan.Rejected {
		if r.Channel != testChannel {
			t.Errorf("rejection %s on channel %q", r.MutationID, r.Channel)
		}
		byID[r.MutationID] = r.Problems
	}
	if p := byID["mut-bad"]; !p.Has("property_id", models.RulePropertyPattern) || !p.Has("amount", models.RuleAmountPlaces) {
		t.Errorf("mut-bad problems %v, want property_id pattern and amount places", p)
	}
	if p := byID["mut-past"]; !p.Has("stay_date", models.RuleNotPast) {
		t.Errorf("mut-past problems %v, want stay_date not past", p)
	}
	if len(plan.Decided) != 1 || plan.Decided[0].Rejected != 2 || plan.Decided[0].Total != 3 {
		t.Errorf("decided %+v, want %s total 3 rejected 2", plan.Decided, testChannel)
	}
	if len(plan.Chunks) != 1 || plan.Chunks[0].Updates != 1 {
		t.Fatalf("chunks %+v, want one chunk with the valid update", plan.Chunks)
	}
	reqs := e.chunkRequests(plan.Chunks[0])
	if len(reqs[0].Refs) != 1 || reqs[0].Refs[0].ID != "mut-good" {
		t.Errorf("chunk refs %+v, want only mut-good", reqs[0].Refs)
	}
}

func TestPrepareBatchCoalescesIntoOrderedChunks(t *testing.T) {
	t.Parallel()
	e := newActivityEnv(t, envOptions{chunkSize: 2})
	var ms []models.Mutation
	// Four consecutive nights at one price and version: one line.
	for n := range 4 {
		ms = append(ms, e.mutation("rate-"+string(rune('a'+n)), 10+n, 2, withRate("150.00")))
	}
	// Bulk full-sync rates for three other properties: three requests, two chunks.
	for i, p := range []string{"prop_00000001", "prop_00000002", "prop_00000003"} {
		ms = append(ms, e.mutation("bulk-"+p, 20, 1, func(m *models.Mutation) {
			m.PropertyID, m.FullSync = p, true
			m.Inventory = ptr(5 + i)
		}))
	}
	// A stop-sell is urgent, on another channel too.
	ms = append(ms, e.mutation("stop", 5, 3, func(m *models.Mutation) { m.StopSell = ptr(true) }))
	ms = append(ms, e.mutation("stop-agoda", 5, 3, func(m *models.Mutation) {
		m.Channel, m.StopSell = "agoda", ptr(true)
	}))
	plan := e.prepare(models.BatchSyncInput{BatchID: "b-order", Mutations: ms})

	type want struct {
		channel           string
		priority, n       int
		requests, updates int
	}
	wants := []want{
		{"agoda", 1, 0, 1, 1},
		{testChannel, 1, 0, 1, 1},
		{testChannel, 3, 0, 1, 4},
		{testChannel, 5, 0, 2, 2},
		{testChannel, 5, 1, 1, 1},
	}
	if len(plan.Chunks) != len(wants) {
		t.Fatalf("chunks %+v, want %d", plan.Chunks, len(wants))
	}
	for i, w := range wants {
		c := plan.Chunks[i]
		if c.Channel != w.channel || c.Priority != w.priority || c.N != w.n || c.Requests != w.requests || c.Updates != w.updates {
			t.Errorf("chunk %d = %+v, want %+v", i, c, w)
		}
		reqs := e.chunkRequests(c)
		updates := 0
		for _, r := range reqs {
			if r.Channel != c.Channel || r.Priority != c.Priority {
				t.Errorf("chunk %s holds a %s p%d request", c.Key, r.Channel, r.Priority)
			}
			updates += len(r.Refs)
		}
		if updates != c.Updates {
			t.Errorf("chunk %s: Updates %d, stored refs %d", c.Key, c.Updates, updates)
		}
	}
	rates := e.chunkRequests(plan.Chunks[2])[0]
	if len(rates.Lines) != 1 || rates.Lines[0].From != e.today.AddDays(10) || rates.Lines[0].To != e.today.AddDays(13) {
		t.Errorf("rates request lines %+v, want one line over nights 10..13", rates.Lines)
	}
}

func TestPrepareBatchSupersededByLedgerIsInNoChunk(t *testing.T) {
	t.Parallel()
	e := newActivityEnv(t, envOptions{})
	night := e.today.AddDays(7)
	committed := models.ChannelRequest{Channel: testChannel, PropertyID: testProperty, Family: models.FamilyRates, Priority: 3,
		Lines: []models.ARILine{{RoomTypeCode: testRoom, RatePlanCode: testPlan, From: night, To: night,
			Values: models.Values{Amount: decimalPtr("200.00"), Currency: "EUR"}, Version: 10}},
		Refs: []models.MutationRef{{ID: "earlier", Version: 10, Line: 0, StayDate: night}}}
	e.acknowledged(committed, "conf-1")
	// Older rates (stale) plus inventory the ledger has not seen (fresh).
	old := e.mutation("old", 7, 5, func(m *models.Mutation) {
		withRate("180.00")(m)
		m.Inventory = ptr(3)
	})
	// Equal version is not older: a re-send goes out.
	same := e.mutation("same", 7, 10, func(m *models.Mutation) {
		m.RoomTypeCode = "STDTWIN"
		withRate("90.00")(m)
	})
	plan := e.prepare(models.BatchSyncInput{BatchID: "b-stale", Mutations: []models.Mutation{old, same}})

	if len(plan.Decided) != 1 || plan.Decided[0].Superseded != 1 || plan.Decided[0].Total != 3 {
		t.Fatalf("decided %+v, want total 3 superseded 1", plan.Decided)
	}
	var fams []string
	for _, c := range plan.Chunks {
		for _, r := range e.chunkRequests(c) {
			for _, ref := range r.Refs {
				fams = append(fams, ref.ID+"/"+string(r.Family))
			}
		}
	}
	slices.Sort(fams)
	if want := []string{"old/availability", "same/rates"}; !slices.Equal(fams, want) {
		t.Errorf("chunked updates %v, want %v (old/rates superseded)", fams, want)
	}
}

func TestPrepareBatchByReference(t *testing.T) {
	t.Parallel()
	e := newActivityEnv(t, envOptions{})
	ms := []models.Mutation{
		e.mutation("ref-1", 1, 1, withRate("100.00")),
		e.mutation("ref-2", 2, 1, func(m *models.Mutation) { m.Inventory = ptr(7) }),
	}
	key, err := e.store.SaveBatch(context.Background(), "b-ref", ms)
	if err != nil {
		t.Fatal(err)
	}
	plan := e.prepare(models.BatchSyncInput{BatchID: "b-ref", PayloadKey: key})
	if plan.Mutations != 2 || len(plan.Chunks) != 1 || plan.Chunks[0].Requests != 2 {
		t.Fatalf("plan %+v, want 2 mutations in one chunk of a rates and an availability request", plan)
	}
	var ids []string
	for _, c := range plan.Chunks {
		for _, r := range e.chunkRequests(c) {
			for _, ref := range r.Refs {
				ids = append(ids, ref.ID)
			}
		}
	}
	slices.Sort(ids)
	if !slices.Equal(ids, []string{"ref-1", "ref-2"}) {
		t.Errorf("chunked mutations %v, want ref-1 and ref-2", ids)
	}

	_, err = e.exec(e.acts.PrepareBatch, models.BatchSyncInput{BatchID: "b-gone", PayloadKey: key + "-missing"})
	if f := failureOf(t, err, models.ErrPayloadLost); !strings.Contains(f.Message, store.ErrBatchNotFound.Error()) {
		t.Errorf("missing payload: %+v, want %v", f, store.ErrBatchNotFound)
	}
}

func TestPrepareBatchAccountsForEveryUpdateOnce(t *testing.T) {
	t.Parallel()
	e := newActivityEnv(t, envOptions{chunkSize: 3})
	night := e.today.AddDays(30)
	committed := models.ChannelRequest{Channel: "expedia", PropertyID: testProperty, Family: models.FamilyAvailability, Priority: 3,
		Lines: []models.ARILine{{RoomTypeCode: testRoom, RatePlanCode: testPlan, From: night, To: night, Values: models.Values{Inventory: ptr(1)}, Version: 50}},
		Refs:  []models.MutationRef{{ID: "earlier", Version: 50, Line: 0, StayDate: night}}}
	e.acknowledged(committed, "conf-x")
	var ms []models.Mutation
	for i, ch := range []string{testChannel, "expedia", "agoda"} {
		for n := range 12 {
			ms = append(ms, e.mutation(ch+"-"+string(rune('a'+n)), 20+n, int64(10+i), func(m *models.Mutation) {
				m.Channel = ch
				m.Amount, m.Currency = ptr(decimal.NewFromInt(int64(100+n%3))), "USD"
				if n%2 == 0 {
					m.Inventory = ptr(n)
				}
				if n%4 == 0 {
					m.MinLOS, m.MaxLOS = ptr(2), ptr(7)
				}
				m.Priority = 1 + n%5
			}))
		}
	}
	// Losers within the batch: an older version of a cell that is also sent newer.
	ms = append(ms, e.mutation("agoda-old", 20, 1, func(m *models.Mutation) {
		m.Channel, m.Amount, m.Currency = "agoda", decimalPtr("1.00"), "USD"
	}))
	// Invalid ones.
	ms = append(ms, e.mutation("no-values", 20, 1, nil))
	ms = append(ms, e.mutation("bad-channel", 20, 1, func(m *models.Mutation) { m.Channel, m.Inventory = "orbitz", ptr(1) }))
	plan := e.prepare(models.BatchSyncInput{BatchID: "b-sum", Mutations: ms})

	var total, rejected, superseded, chunked int
	for _, c := range plan.Decided {
		total += c.Total
		rejected += c.Rejected
		superseded += c.Superseded
	}
	seen := map[string]bool{}
	for _, c := range plan.Chunks {
		chunked += c.Updates
		for _, r := range e.chunkRequests(c) {
			for _, ref := range r.Refs {
				k := ref.ID + "/" + string(r.Family)
				if seen[k] {
					t.Errorf("update %s is in more than one request", k)
				}
				seen[k] = true
			}
		}
	}
	if rejected != 2 {
		t.Errorf("rejected %d, want 2", rejected)
	}
	// expedia night 30 availability lost to the ledger; agoda-old lost in the batch.
	if superseded != 2 {
		t.Errorf("superseded %d, want 2", superseded)
	}
	if total != rejected+superseded+chunked {
		t.Errorf("decided total %d != rejected %d + superseded %d + chunked %d", total, rejected, superseded, chunked)
	}
	var want int
	for _, m := range ms {
		if len(e.acts.Validator.Validate(m)) > 0 {
			want++
		} else {
			want += len(m.Families())
		}
	}
	if total != want {
		t.Errorf("decided total %d, want %d: one per (valid mutation, family) plus one per rejection", total, want)
	}
	if len(seen) != chunked {
		t.Errorf("%d distinct chunked updates, chunks say %d", len(seen), chunked)
	}
	for i := 1; i < len(plan.Chunks); i++ {
		if plan.Chunks[i].Priority < plan.Chunks[i-1].Priority {
			t.Errorf("chunk %d (p%d) after a p%d chunk", i, plan.Chunks[i].Priority, plan.Chunks[i-1].Priority)
		}
	}
}
