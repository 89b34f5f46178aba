package ops

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/paritysync/paritysync/models"
)

// TestWindowTimeIsRequestsOverRateInWindows holds the rule the dry run reckons
// the windows' time by.
func TestWindowTimeIsRequestsOverRateInWindows(t *testing.T) {
	c := models.NewChannelConfig("x", 60)
	require.Equal(t, 90*time.Second, WindowTime(90, c))
	require.Zero(t, WindowTime(0, c))
	c.Window = 10 * time.Second
	require.Equal(t, 15*time.Second, WindowTime(90, c))
}
