package main

import (
	"errors"
	"fmt"
	"io"

	"github.com/watchbot/watchbot/internal/setting"
	"github.com/watchbot/watchbot/supervisor"
)

// exitCodes is watchbot's exit-code table, printed in docs/operator-tools.md. The first matching row wins.
var exitCodes = []struct {
	code    int
	meaning string
	match   func(error) bool
}{
	{0, "success; for listen, a clean drain: every message deleted, released or dead-lettered", func(err error) bool { return err == nil }},
	{10, "for try: listen would release the message", isDecided(10)},
	{11, "for try: listen would retry the message", isDecided(11)},
	{12, "for try: listen would leave the message to the redrive policy", isDecided(12)},
	{13, "for try: listen would dead-letter the message", isDecided(13)},
	{3, "for fleet: the change was made, but a live task did not acknowledge it within --wait-timeout (they are named)", func(err error) bool {
		var n notAcknowledged
		return errors.As(err, &n)
	}},
	{130, "for listen: stopped at once by a second SIGINT/SIGTERM, running jobs killed and their messages released; for the other commands: stopped by SIGINT/SIGTERM, after giving back what they held", func(err error) bool {
		var i interrupted
		return errors.Is(err, supervisor.ErrAborted) || errors.As(err, &i)
	}},
	// No meaning of its own: the runtime row below documents code 1 once.
	{1, "", func(err error) bool {
		var p progressFailure
		return errors.As(err, &p)
	}},
	{2, "bad usage or configuration: unknown flag, command or verb, missing or invalid value, stray argument, failed startup check, a queue that does not exist, a queue listen may not read, AWS credentials missing or refused", func(err error) bool {
		var u usageError
		var c setting.Error
		return errors.As(err, &u) || errors.As(err, &c) && c.Err == nil
	}},
	{1, "runtime failure: the queue became unreachable at startup, SQS could not be reached, permission denied to an operator's command, an operation failed; for health, not healthy or no answer; for progress, every failure, bad input included, as watchbot-progress exits", func(error) bool { return true }},
}

// isDecided matches try's decision code.
func isDecided(code int) func(error) bool {
	return func(err error) bool {
		var d decided
		return errors.As(err, &d) && int(d) == code
	}
}

// interrupted is an operator command stopped by SIGINT or SIGTERM; it says what was left how.
type interrupted struct{ what string }

func (e interrupted) Error() string { return "interrupted: " + e.what }

// usageError marks errors in what the user typed.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

// usagef returns a usageError.
func usagef(format string, args ...any) error { return usageError{fmt.Errorf(format, args...)} }

// exitCode prints err as one line and returns the code the exit-code table gives it.
func exitCode(err error, stderr io.Writer) int {
	var d decided
	if err != nil && !errors.As(err, &d) {
		fmt.Fprintf(stderr, "watchbot: %v\n", err)
	}
	for _, row := range exitCodes {
		if row.match(err) {
			return row.code
		}
	}
	return 1
}
