package e2e

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/shopspring/decimal"
	"github.com/stretchr/testify/require"

	"github.com/paritysync/paritysync/config"
	"github.com/paritysync/paritysync/dial/devtest"
	"github.com/paritysync/paritysync/dial/redistest"
	"github.com/paritysync/paritysync/e2e/stack"
	"github.com/paritysync/paritysync/models"
	"github.com/paritysync/paritysync/otasim/sample"
)

// yearOfRates is n rate changes over a year of nights on one channel: properties ×
// 3 rooms × 2 rate plans each night, as many properties as a year of n needs, with a
// price and a version of their own every `every` nights (7: the nights of a week
// coalesce into one line and the gate holds a range per week; 1: every night is a
// line of its own and a range of its own, the gate's worst case).
func yearOfRates(channel string, n, every int, today models.Date, version int64) []models.Mutation {
	rooms, plans := sample.Rooms, sample.Plans
	props := (n + 365*len(rooms)*len(plans) - 1) / (365 * len(rooms) * len(plans))
	ms := make([]models.Mutation, 0, n)
	for night := 1; len(ms) < n; night++ {
		for p := 0; p < props && len(ms) < n; p++ {
			for ri, r := range rooms {
				for _, plan := range plans {
					if len(ms) == n {
						break
					}
					step := int64(night / every)
					amount := decimal.New(10000+int64(ri)*5000+step*500, -2)
					ms = append(ms, models.Mutation{ID: fmt.Sprintf("m%06d", len(ms)), Channel: channel,
						PropertyID: fmt.Sprintf("prop_%08x", p+1), RoomTypeCode: r, RatePlanCode: plan,
						StayDate: today.AddDays(night), Values: models.Values{Amount: &amount, Currency: "EUR"}, Version: version + step})
				}
			}
		}
	}
	return ms
}

// TestRedisMemoryFullStack is the full stack's Redis memory measurement: a private
// stack (dev server, simulator, this worker, a key prefix of its own) takes a batch
// of 50,000 rate changes over a year of nights (PARITYSYNC_MEASURE_MEMORY=100000 for
// 100,000), once with a price and version a week and once with a price and version
// a night (a line and a gate range per night), and the sum of MEMORY USAGE of every key under the prefix, once the
// batch finished and its leases and reservations expired, must be within 2 MB of the
// sum before it. The channel's window is 6 s so that the schedule expires quickly,
// and its limit is high so that the batch takes minutes. It runs only when
// PARITYSYNC_MEASURE_MEMORY is set:
//
//	PARITYSYNC_MEASURE_MEMORY=1 go test -run TestRedisMemoryFullStack -v -timeout 30m ./e2e
func TestRedisMemoryFullStack(t *testing.T) {
	sel := os.Getenv("PARITYSYNC_MEASURE_MEMORY")
	if sel == "" {
		t.Skip("set PARITYSYNC_MEASURE_MEMORY=1 (or a mutation count) to run the full-stack Redis memory measurement")
	}
	n := 50_000
	if v, err := strconv.Atoi(sel); err == nil && v > 1 {
		n = v
	}
	srv := startDevServer(t)
	for _, every := range []int{7, 1} {
		t.Run(fmt.Sprintf("a price and version every %d nights", every), func(t *testing.T) {
			measureBatchMemory(t, srv, n, every)
		})
	}
}

// measureBatchMemory runs one batch of n changes (a price and version every `every`
// nights) on a stack of its own and checks its Redis memory.
func measureBatchMemory(t *testing.T, srv *devtest.Env, n, every int) {
	const slug = "expedia"
	s := startStackWith(t, srv, stack.Options{
		Channels: map[string]stack.Channel{slug: {PerMinute: 600, Burst: 60, MaxLines: 100}},
		Window:   testWindow,
		Env:      map[string]string{"PARITYSYNC_CHUNK_SIZE": fmt.Sprint(config.DefaultSettings().ChunkSize)},
	})
	today := models.DateOf(time.Now())
	ms := yearOfRates(slug, n, every, today, time.Now().UnixNano())
	last := ms[len(ms)-1].StayDate
	require.LessOrEqual(t, last.DaysSince(today), 366, "the batch reaches %s, beyond a year of nights", last)
	st := s.OpenStore(t)
	batchID := "memory-" + uuid.NewString()[:8]
	key, err := st.SaveBatch(context.Background(), batchID, ms)
	require.NoError(t, err)

	before, beforeKinds := redistest.Memory(t, s.RDB, s.Prefix)
	started := time.Now()
	bs := waitBatch(t, s.startBatch(t, models.BatchSyncInput{BatchID: batchID, PayloadKey: key,
		Retry: models.DefaultRetryPolicy()}), 25*time.Minute)
	took := time.Since(started)
	total := bs.Totals()
	require.True(t, bs.Done)
	require.Equal(t, n, total.Committed, "every change committed: %+v", total)
	finished, finishedKinds := redistest.Memory(t, s.RDB, s.Prefix)

	// Wait for the leases, the schedule and the reservations to expire.
	deadline := time.Now().Add(3 * time.Minute)
	var after int64
	var afterKinds redistest.Kinds
	for {
		after, afterKinds = redistest.Memory(t, s.RDB, s.Prefix)
		if afterKinds["sched"]+afterKinds["res"]+afterKinds["lease"] == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Second)
	}
	idle := time.Since(started) - took
	cs := s.Sim.Stats()[slug]
	t.Logf("%d mutations (%s to %s) in %d requests, batch in %s; Redis memory under the prefix: "+
		"before %d B (%s); when the batch finished %d B (%s); %s later, leases and reservations expired, "+
		"%d B (%s): grew %d B (%.2f MB)",
		n, today.AddDays(1), last, cs.Accepted, took.Round(time.Second), before, beforeKinds,
		finished, finishedKinds, idle.Round(time.Second), after, afterKinds,
		after-before, float64(after-before)/(1<<20))
	require.Zero(t, afterKinds["sched"]+afterKinds["res"]+afterKinds["lease"],
		"schedule, reservations and leases still held 3 minutes after the batch")
	require.LessOrEqual(t, after-before, int64(2<<20), "Redis memory grew more than 2 MB over the batch")
}
