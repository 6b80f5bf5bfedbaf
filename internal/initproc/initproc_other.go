//go:build !linux

package initproc

import "io"

// Run is a no-op outside Linux, where watchbot is never a container's PID 1: it reports that
// the caller goes on as usual.
func Run(args, env []string, stderr io.Writer) (code int, isInit bool) { return 0, false }
