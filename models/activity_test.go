package models

import (
	"encoding/json"
	"testing"
	"time"
)

// TestFailureWaitIsReadableAndOldHistoriesStillRead: a typed error's detail shows
// its wait as a duration in the Temporal UI, and reads the nanoseconds of histories
// recorded before.
func TestFailureWaitIsReadableAndOldHistoriesStillRead(t *testing.T) {
	f := Failure{Wait: 17 * time.Second, ServerWait: true, Status: 429, Tier: "throttle"}
	b, err := json.Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != `{"server_wait":true,"status":429,"tier":"throttle","wait":"17s"}` {
		t.Fatalf("failure JSON %s", b)
	}
	var got Failure
	if err := json.Unmarshal(b, &got); err != nil || got != f {
		t.Fatalf("round trip: %+v, %v", got, err)
	}
	if err := json.Unmarshal([]byte(`{"wait":17000000000,"server_wait":true,"status":429,"tier":"throttle"}`), &got); err != nil ||
		got != f {
		t.Fatalf("nanoseconds: %+v, %v", got, err)
	}
}
