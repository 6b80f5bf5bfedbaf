//go:build !unix

package main

import (
	"errors"
	"os"
)

// pollable fails where a descriptor cannot be put in non-blocking mode for Go's poller
// (Windows): readStdin then reads f itself, and a signal stops the command only once the
// read returns.
func pollable(*os.File) (*os.File, func(), error) {
	return nil, nil, errors.ErrUnsupported
}
