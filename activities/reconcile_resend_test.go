package activities

import (
	"testing"
	"time"

	"github.com/paritysync/paritysync/channels"
	"github.com/paritysync/paritysync/models"
)

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
