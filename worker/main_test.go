package worker

import (
	"testing"

	"github.com/watchbot/watchbot/internal/testing/testenv"
)

// TestMain clears this machine's AWS and tracing variables first. Workers started in process inherit the test process's environment,
// and this machine's (AWS_CA_BUNDLE among them) are not a user's.
func TestMain(m *testing.M) { testenv.Main(m) }
