package supervisor

import "errors"

// ErrAborted is returned by Run when a second stop request ended the drain at once.
var ErrAborted = errors.New("stopped at once by a second signal")

// ConfigError is a configuration value that Validate or a startup check refused. Flag names
// the flag the user typed (e.g. "--heartbeat-interval").
type ConfigError struct {
	Flag string
	Msg  string
}

func (e ConfigError) Error() string {
	if e.Flag == "" {
		return e.Msg
	}
	return e.Flag + ": " + e.Msg
}
