package activities

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.temporal.io/sdk/testsuite"

	"github.com/paritysync/paritysync/activities/store"
	"github.com/paritysync/paritysync/models"
)

// heapPeak samples HeapInuse every millisecond while fn runs, with the collector
// kept tight (GOGC 5) so that the heap follows what is live, and returns the most
// it rose above where it was when fn started.
func heapPeak(fn func()) uint64 {
	defer debug.SetGCPercent(debug.SetGCPercent(5))
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base := ms.HeapInuse
	var peak atomic.Uint64
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		var m runtime.MemStats
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			runtime.ReadMemStats(&m)
			if m.HeapInuse > base && m.HeapInuse-base > peak.Load() {
				peak.Store(m.HeapInuse - base)
			}
			select {
			case <-done:
				return
			case <-tick.C:
			}
		}
	}()
	fn()
	close(done)
	wg.Wait()
	return peak.Load()
}

// TestDiffChannelHoldsOnePropertyAndARetryReadsOnlyWhatIsLeft reads back a channel
// of 40 properties × 3 rooms × 2 plans × 30 nights (7,200 cells) and measures
// DiffChannel's memory: the most its heap rises is well under what the channel's
// cells take loaded at once (it holds one property's). Then a retry whose
// heartbeat says the first 20 properties are done reads only the other 20: the
// channel serves, and the limiter is paid for, 20 reads, not 40.
func TestDiffChannelHoldsOnePropertyAndARetryReadsOnlyWhatIsLeft(t *testing.T) {
	e := newActivityEnv(t, envOptions{})
	const nProps, nights = 40, 30
	rooms, plans := []string{"DLXKING", "STDQUEEN", "SUITE"}, []string{"BAR_FLEX", "BAR_NR"}
	props := make([]string, nProps)
	for i := range props {
		props[i] = fmt.Sprintf("prop_%08x", 0x1a2b3c00+i)
		var ms []models.Mutation
		for _, r := range rooms {
			for _, p := range plans {
				for n := range nights {
					ms = append(ms, e.mutation(fmt.Sprintf("m-%d-%s-%s-%d", i, r, p, n), n, 1, func(m *models.Mutation) {
						m.PropertyID, m.RoomTypeCode, m.RatePlanCode = props[i], r, p
						withRate(fmt.Sprintf("%d.00", 100+n))(m)
					}))
				}
			}
		}
		batch := fmt.Sprintf("b-mem-%d", i)
		c := e.preparedChunk(batch, ms...)
		for j := range c.Requests {
			if res, err := e.push(models.PushInput{BatchID: batch, ChunkKey: c.Key, Index: j}); err != nil || res.Committed == 0 {
				t.Fatalf("push %s #%d: %+v, %v", batch, j, res, err)
			}
		}
	}
	in := models.DiffInput{Channel: testChannel, From: e.today, To: e.today.AddDays(nights - 1), BatchID: "rc-mem"}
	cells := nProps * len(rooms) * len(plans) * nights

	// What the channel's cells take, loaded at once (as DiffChannel did before it
	// paged by property).
	var all []store.CellState
	whole := heapPeak(func() {
		if err := e.store.CellStates(t.Context(), testChannel, in.From, in.To, func(c store.CellState) error {
			all = append(all, c)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	})
	if len(all) < cells {
		t.Fatalf("the store holds %d cell states, want at least %d", len(all), cells)
	}
	all = nil

	readsBefore := e.sim.Stats()[testChannel].Reads
	var first models.ChannelDrift
	peak := heapPeak(func() {
		v, err := e.exec(e.acts.DiffChannel, in)
		if err != nil {
			t.Fatal(err)
		}
		if err := v.Get(&first); err != nil {
			t.Fatal(err)
		}
	})
	firstReads := e.sim.Stats()[testChannel].Reads - readsBefore
	if first.Checked != cells || first.Drifted != 0 || first.Reads != nProps || firstReads != nProps {
		t.Fatalf("first attempt: %+v, the channel served %d reads; want %d checked, none drifted, %d reads",
			first, firstReads, cells, nProps)
	}

	// The retry: the worker died after the heartbeat of the 20th property.
	done := nProps / 2
	p := diffProgress{After: props[done-1],
		Drift: models.ChannelDrift{Channel: testChannel, Checked: cells / 2, Reads: done}}
	readsBefore = e.sim.Stats()[testChannel].Reads
	var resumed models.ChannelDrift
	retryPeak := heapPeak(func() {
		v, err := e.execWith(e.acts.DiffChannel, in, func(env *testsuite.TestActivityEnvironment) {
			env.SetHeartbeatDetails(p)
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := v.Get(&resumed); err != nil {
			t.Fatal(err)
		}
	})
	retryReads := e.sim.Stats()[testChannel].Reads - readsBefore
	t.Logf("DiffChannel of %d properties, %d cells: heap rose at most %d KB (the channel's cells loaded at once: %d KB); "+
		"%d reads; a retry after the heartbeat of property %d: %d reads paid and served (%d properties left), heap rose at most %d KB",
		nProps, cells, peak>>10, whole>>10, firstReads, done, retryReads, nProps-done, retryPeak>>10)
	if retryReads != nProps-done || resumed.Reads != nProps || resumed.Checked != cells {
		t.Errorf("retry: the channel served %d reads, result %+v; want %d reads (only the properties left) and the whole channel's counts",
			retryReads, resumed, nProps-done)
	}
	if peak*2 > whole {
		t.Errorf("DiffChannel's heap rose %d B, more than half of the %d B the channel's cells take at once", peak, whole)
	}
}
