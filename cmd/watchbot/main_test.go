package main

import (
	"testing"

	"github.com/watchbot/watchbot/internal/testing/testenv"
)

// TestMain clears this machine's AWS and tracing variables first. Its commands run in process load the AWS configuration (awsenv.Load) from the environment,
// and this machine's (AWS_CA_BUNDLE among them) are not a user's.
func TestMain(m *testing.M) { testenv.Main(m) }
