package supervisor

import (
	"errors"
	"fmt"
	"os/exec"

	"github.com/watchbot/watchbot/internal/setting"
)

// ErrAborted is returned by Run when a second stop request ended the drain at once.
var ErrAborted = errors.New("stopped at once by a second signal")

// resolveCommand finds the worker command's program as starting it would, and returns the
// command with the program's path: listen and try refuse a command that cannot be run before
// any message is received or run.
func resolveCommand(command []string) ([]string, error) {
	path, err := exec.LookPath(command[0])
	if err != nil {
		if e, ok := errors.AsType[*exec.Error](err); ok {
			err = e.Err
		}
		return nil, setting.Refuse("", nil, fmt.Sprintf("worker command %q: %v", command[0], err))
	}
	return append([]string{path}, command[1:]...), nil
}
