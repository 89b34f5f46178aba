package store

import (
	"errors"
	"fmt"
	"os"
	"testing"

	"github.com/paritysync/paritysync/activities/store/storetest"
	"github.com/paritysync/paritysync/dial/testenv"
)

// TestMain checks the database first: the examples open a schema of their own and,
// unlike a test, cannot skip, so without PostgreSQL the package is skipped as a
// whole (each of its tests would skip alike), and fails under
// PARITYSYNC_TEST_REQUIRE.
func TestMain(m *testing.M) {
	_, drop, err := storetest.NewSchema("storeprobe")
	if errors.Is(err, storetest.ErrUnreachable) {
		if testenv.Required() {
			fmt.Fprintf(os.Stderr, "FAIL: %v (%s is set: a missing service fails the run)\n", err, testenv.RequireEnv)
			os.Exit(1)
		}
		fmt.Printf("skip: %v (set %s=1 to make this a failure)\n", err, testenv.RequireEnv)
		os.Exit(0)
	}
	if err == nil {
		err = drop()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(m.Run())
}
