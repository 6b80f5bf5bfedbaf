package supervisor

import (
	"fmt"

	"github.com/watchbot/watchbot/internal/setting"
)

// PlatformError is the error with which a command that runs workers (listen, try) refuses to
// start on goos, a runtime.GOOS value, or nil on Linux: workers run in process groups that
// watchbot kills with them, and are watched through Linux calls. The operator tools run
// everywhere.
func PlatformError(command, goos string) error {
	if goos == "linux" {
		return nil
	}
	return setting.Refuse("", nil, fmt.Sprintf("watchbot %s runs on Linux only; on %s, run it in a Linux container or VM "+
		"(send, status, dead-letter, template, progress and alarms run here)", command, goos))
}
