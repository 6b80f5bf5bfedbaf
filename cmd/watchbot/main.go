// Command watchbot supervises queue workers on Amazon SQS and ships the operator tools around
// them. This package only translates: flags and environment into config structs, signals into
// contexts, errors into exit codes. The packages decide.
package main

import (
	"context"
	"io"
	"os"
	"os/signal"
	"runtime"
	"sync"
	"syscall"

	"github.com/urfave/cli/v2"

	"github.com/watchbot/watchbot/internal/initproc"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	// As a container's PID 1, watchbot is first the container's init: it runs itself again
	// as its child and reaps the orphans the container's processes leave (docs/containers.md).
	if code, isInit := initproc.Run(os.Args, os.Environ(), os.Stderr); isInit {
		os.Exit(code)
	}
	if len(os.Args) > 1 && os.Args[1] == "listen" {
		spareProc(os.Getenv("GOMAXPROCS"))
	}
	os.Exit(run(os.Args, os.Stdin, os.Stdout, os.Stderr))
}

// spareProc gives the Go runtime one processor (P) more than its default (the CPUs, or the
// container's CPU limit, as read at start: the runtime no longer follows a changed limit),
// unless GOMAXPROCS is set. Starting a worker holds a P without using a CPU until the child
// has exec'd (os.StartProcess is a vfork, a raw system call the runtime cannot hand the P off
// from), and starts are serialized, so one P is enough to cover it. Without it, on a small
// machine that P is a large share of the supervisor's: exited workers, receives and the next
// starts wait for it, and slots stand idle (docs/performance.md has the figures). It is set
// here, once for the process and before anything runs, for listen alone: the other commands
// start no workers, and tests that run commands in-process leave the runtime as it is. A
// listen with --http-worker starts no workers either, and leaves the extra P idle.
func spareProc(env string) {
	if env == "" {
		runtime.GOMAXPROCS(runtime.GOMAXPROCS(0) + 1)
	}
}

// run executes the CLI and returns the process exit code. The first SIGINT/SIGTERM cancels
// the context handed to the command (a graceful stop); a second one closes abort (stop now).
// Nothing it starts outlives it.
func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	abort, done := make(chan struct{}), make(chan struct{})
	var watcher sync.WaitGroup
	defer watcher.Wait()
	defer close(done)
	watcher.Go(func() { abortOnSecondSignal(ctx, done, abort) })

	app := newApp(stdin, stdout, stderr, abort)
	err := app.RunContext(ctx, args)
	return exitCode(withFlags(err, nil), stderr)
}

// abortOnSecondSignal closes abort when SIGINT or SIGTERM comes again after the first one
// cancelled ctx. It returns as soon as done is closed.
func abortOnSecondSignal(ctx context.Context, done <-chan struct{}, abort chan<- struct{}) {
	select {
	case <-ctx.Done():
	case <-done:
		return
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	select {
	case <-sigs:
		close(abort)
	case <-done:
	}
}

func newApp(stdin io.Reader, stdout, stderr io.Writer, abort <-chan struct{}) *cli.App {
	app := &cli.App{
		Name:    "watchbot",
		Usage:   "supervise queue workers on Amazon SQS",
		Version: version,
		Description: "watchbot long-polls an SQS queue, runs a worker command per message, deletes on success,\n" +
			"backs failures off through the visibility timeout and lets the redrive policy move poison\n" +
			"messages to a dead-letter queue. See https://github.com/watchbot/watchbot#readme.",
		Reader:          stdin,
		Writer:          stdout,
		ErrWriter:       stderr,
		HideHelpCommand: true,
		// Errors are printed once, by exitCode; urfave/cli must not exit or print them itself.
		ExitErrHandler: func(*cli.Context, error) {},
		Commands: []*cli.Command{
			listenCommand(abort),
			alarmsCommand(),
			deadLetterCommand(),
			fleetCommand(),
			healthCommand(),
			progressCommand(),
			sendCommand(),
			statusCommand(),
			templateCommand(),
			tryCommand(stdout),
			versionCommand(),
		},
		OnUsageError: onUsageError,
		Action:       rootAction,
	}
	withUsage(app.Commands)
	withHelp(app)
	return app
}

func versionCommand() *cli.Command {
	return &cli.Command{
		Name:  "version",
		Usage: "print the version",
		// The same line as --version, which urfave/cli prints.
		Action: func(c *cli.Context) error {
			cli.ShowVersion(c)
			return nil
		},
	}
}
