package supervisor

import "errors"

// ErrAborted is returned by Run when a second stop request ended the drain at once.
var ErrAborted = errors.New("stopped at once by a second signal")
