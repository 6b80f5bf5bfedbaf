package supervisor

import (
	"errors"
	"fmt"

	"github.com/watchbot/watchbot/internal/listenspec"
)

// ErrAborted is returned by Run when a second stop request ended the drain at once.
var ErrAborted = errors.New("stopped at once by a second signal")

// commandError is the startup error of a worker command that cannot be run.
func commandError(command string, err error) error {
	return listenspec.Refuse("", nil, fmt.Sprintf("worker command %q: %v", command, unwrapExec(err)))
}
