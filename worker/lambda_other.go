//go:build !linux

package worker

import "log/slog"

func startRuntime(*runtimeEnv, []string, []string, *slog.Logger) error { return errNotLinux }
