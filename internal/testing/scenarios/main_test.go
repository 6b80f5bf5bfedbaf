package scenarios

import (
	"flag"
	"os"
	"testing"

	"github.com/watchbot/watchbot/internal/testing/testenv"
)

// TestMain clears this machine's AWS and tracing variables, which the workers of in-process supervisors
// would inherit, and runs up to 4 scenarios at once unless -test.parallel says otherwise: they wait
// on visibility timeouts, backoffs and stalls far more than they compute, so the default
// (GOMAXPROCS, 2 on small CI machines) would leave the suite idle most of its time.
func TestMain(m *testing.M) {
	testenv.ClearAWS()
	testenv.ClearTracing()
	flag.Parse()
	explicit := false
	flag.Visit(func(f *flag.Flag) { explicit = explicit || f.Name == "test.parallel" })
	if !explicit {
		if err := flag.Set("test.parallel", "4"); err != nil {
			panic(err)
		}
	}
	os.Exit(m.Run())
}
