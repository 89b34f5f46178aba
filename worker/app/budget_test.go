package app

import (
	"errors"
	"strings"
	"testing"

	"github.com/paritysync/paritysync/config"
	"github.com/paritysync/paritysync/dial/redistest"

	"github.com/paritysync/paritysync/limiter"
	"github.com/paritysync/paritysync/models"
)

// TestWorkerRefusesToSplitAChannelsBudget: a second worker on the same Redis and key
// prefix whose channel file gives a channel another rate stops at start, naming the
// channel and the field; one with the same budget starts.
func TestWorkerRefusesToSplitAChannelsBudget(t *testing.T) {
	rdb, prefix := redistest.Client(t, "budget")
	s := config.Settings{KeyPrefix: prefix}
	first := models.NewChannelConfig("expedia", 60)
	if _, err := newLimiter(rdb, s, []models.ChannelConfig{first}); err != nil {
		t.Fatalf("first worker: %v", err)
	}
	if _, err := newLimiter(rdb, s, []models.ChannelConfig{first}); err != nil {
		t.Fatalf("a worker with the same budget: %v", err)
	}
	other := models.NewChannelConfig("expedia", 40)
	_, err := newLimiter(rdb, s, []models.ChannelConfig{other})
	var se startupError
	if !errors.As(err, &se) || !errors.Is(err, limiter.ErrBudgetMismatch) {
		t.Fatalf("error %v, want a startup error for the budget mismatch", err)
	}
	if msg := err.Error(); !strings.Contains(msg, "expedia") || !strings.Contains(msg, "rate_per_minute") {
		t.Errorf("error %q does not name the channel and the field", msg)
	}
}
