package activities

import (
	"encoding/json"
	"time"

	"github.com/paritysync/paritysync/models"
)

type plainFailure Failure

// failureJSON is Failure with its wait readable in the Temporal UI.
type failureJSON struct {
	plainFailure
	Wait models.Duration `json:"wait"`
}

// MarshalJSON writes the wait as a duration string ("20s").
func (f Failure) MarshalJSON() ([]byte, error) {
	return json.Marshal(failureJSON{plainFailure(f), models.Duration(f.Wait)})
}

// UnmarshalJSON reads the wait as a duration string or nanoseconds (histories
// recorded before).
func (f *Failure) UnmarshalJSON(b []byte) error {
	var v failureJSON
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*f = Failure(v.plainFailure)
	f.Wait = time.Duration(v.Wait)
	return nil
}
