// Package initproc makes watchbot a container's init when it is started as PID 1, as tini or
// `docker run --init` would be, built in.
//
// PID 1 of a PID namespace has two duties no other process has. Every process orphaned in the
// namespace is handed to it, and only its wait(2) removes them from the process table: an init
// that never waits leaves a zombie for every orphan (a worker's background child, the children
// a killed worker leaves), until forks fail. And the kernel delivers it only the signals it has
// a handler for, so `docker stop`'s SIGTERM reaches it only by choice.
//
// As PID 1, watchbot therefore starts itself again, with the same arguments and environment,
// as its only direct child, and does nothing else: it forwards the signals a container gets to
// that child, waits for every process handed to it, and exits with the child's exit code. The
// watchbot that runs the command is the child, and its workers are its own children, which
// only it waits for: the init's waits reap orphans alone, so a worker's exit status always
// reaches the code that waits for it.
//
// When watchbot is not PID 1 (ECS's initProcessEnabled, docker --init, a Kubernetes pod that
// shares its process namespace) the init already exists and nothing here runs.
package initproc
