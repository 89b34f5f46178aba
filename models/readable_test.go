package models

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func TestDurationsInWorkflowPayloadsAreReadableAndOldOnesStillRead(t *testing.T) {
	b, err := json.Marshal(DefaultRetryPolicy())
	if err != nil {
		t.Fatal(err)
	}
	if got := string(b); !strings.Contains(got, `"max_wait":"5m0s"`) || !strings.Contains(got, `"initial":"1s"`) ||
		!strings.Contains(got, `"attempts":5`) {
		t.Fatalf("retry policy JSON %s, want duration strings", got)
	}
	var p RetryPolicy
	if err := json.Unmarshal(b, &p); err != nil || p != DefaultRetryPolicy() {
		t.Fatalf("round trip: %+v, %v", p, err)
	}
	// As histories recorded before hold it: nanoseconds.
	if err := json.Unmarshal([]byte(`{"initial":1000000000,"max":60000000000,"attempts":5,"max_wait":300000000000,"max_deferrals":200}`), &p); err != nil ||
		p != DefaultRetryPolicy() {
		t.Fatalf("nanoseconds: %+v, %v", p, err)
	}
	b, _ = json.Marshal(Slot{Index: 3, Wait: 3848 * time.Millisecond, About: "push rates p 2027-03-01, 1 line"})
	if string(b) != `{"index":3,"about":"push rates p 2027-03-01, 1 line","wait":"3.848s"}` {
		t.Fatalf("slot JSON %s", b)
	}
	var s Slot
	if err := json.Unmarshal([]byte(`{"index":3,"wait":3848000000}`), &s); err != nil || s.Wait != 3848*time.Millisecond {
		t.Fatalf("old slot: %+v, %v", s, err)
	}
	var d Duration
	if err := json.Unmarshal([]byte(`"soon"`), &d); err == nil || !strings.Contains(err.Error(), `duration "soon"`) {
		t.Fatalf("a bad duration names itself: %v", err)
	}
}

func TestChannelRequestSummaryNamesFamilyPropertyNightsAndLines(t *testing.T) {
	day := func(y int, m time.Month, d int) Date { return Date{Year: y, Month: m, Day: d} }
	r := ChannelRequest{Family: FamilyRates, PropertyID: "prop_0000abcd", Lines: []ARILine{
		{From: day(2027, 3, 10), To: day(2027, 3, 31)}, {From: day(2027, 3, 1), To: day(2027, 3, 5)}}}
	if got := r.Summary(); got != "push rates prop_0000abcd 2027-03-01..03-31, 2 lines" {
		t.Fatalf("summary %q", got)
	}
	r.Lines = []ARILine{{From: day(2027, 12, 30), To: day(2028, 1, 2)}}
	if got := r.Summary(); got != "push rates prop_0000abcd 2027-12-30..2028-01-02, 1 line" {
		t.Fatalf("summary %q", got)
	}
}
