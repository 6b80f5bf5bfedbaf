// Package container runs the static watchbot binary as a container runs it, with the tools of
// a Linux machine instead of a container runtime: PID 1 of a new PID namespace, a read-only
// root with one writable volume where the CloudFormation template mounts it (the paths are the
// template's own: cloudformation.WatchbotPath and ScratchPath), /dev/shm of 64 MiB as Docker
// gives it, an unprivileged user, and only the environment the task definition sets. `make
// smoke-container` runs it and `make test` includes it. It needs root (to make namespaces and
// mounts) and is never skipped under CI=true.
package container
