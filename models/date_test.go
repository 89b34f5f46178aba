package models

import (
	"encoding/json"
	"testing"
)

func TestDateJSONRoundTrip(t *testing.T) {
	for _, d := range []Date{{}, {Year: 2027, Month: 2, Day: 28}} {
		b, err := json.Marshal(d)
		if err != nil {
			t.Fatal(err)
		}
		var back Date
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatalf("%s does not read back: %v", b, err)
		}
		if back != d {
			t.Errorf("%s read back as %v", b, back)
		}
	}
}
