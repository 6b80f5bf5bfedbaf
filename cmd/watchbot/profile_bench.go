//go:build benchprofile

package main

// Built with -tags benchprofile (the bench's -cpuprofile), watchbot writes a CPU profile of
// itself to $WATCHBOT_CPUPROFILE, ended by the SIGTERM or SIGINT that stops it.

import (
	"os"
	"os/signal"
	"runtime/pprof"
	"syscall"
)

func init() {
	path := os.Getenv("WATCHBOT_CPUPROFILE")
	if path == "" {
		return
	}
	f, err := os.Create(path)
	if err != nil || pprof.StartCPUProfile(f) != nil {
		return
	}
	stopped := make(chan os.Signal, 1)
	signal.Notify(stopped, syscall.SIGTERM, syscall.SIGINT)
	go func() { // ended by the stop signal; the drain after it outlasts the flush
		<-stopped
		pprof.StopCPUProfile()
		_ = f.Close()
	}()
}
