package lambda

import (
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"time"
)

// The Extensions API (version 2020-01-01), as
// https://docs.aws.amazon.com/lambda/latest/dg/runtimes-extensions-api.html documents it.
// aws-lambda-go registers an internal extension for no event so that the runtime gets SIGTERM
// before SIGKILL; an extension registered for SHUTDOWN gets it when the environment drains.
const (
	extensionPrefix     = "/2020-01-01/extension/"
	headerExtensionName = "Lambda-Extension-Name"
	headerExtensionID   = "Lambda-Extension-Identifier"
	eventShutdown       = "SHUTDOWN"
)

// extension is a registered extension: its name and whether it asked for SHUTDOWN.
type extension struct {
	name     string
	shutdown bool
}

// register registers an extension. Only SHUTDOWN is served: an extension that asks for
// INVOKE events is refused, so it fails its init loudly rather than waiting for events that
// never come.
func (s *Server) register(w http.ResponseWriter, r *http.Request) {
	name := r.Header.Get(headerExtensionName)
	var req struct {
		Events []string `json:"events"`
	}
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<10)).Decode(&req); err != nil || name == "" {
		refuse(w, http.StatusBadRequest, "InvalidRequest", "want a Lambda-Extension-Name header and a JSON body with events")
		return
	}
	for _, e := range req.Events {
		if e != eventShutdown {
			refuse(w, http.StatusBadRequest, "Extension.UnsupportedEvent", fmt.Sprintf("event %q is not served: only SHUTDOWN", e))
			return
		}
	}
	id := rand.Text()
	s.mu.Lock()
	s.exts[id] = extension{name: name, shutdown: slices.Contains(req.Events, eventShutdown)}
	s.mu.Unlock()
	w.Header().Set(headerExtensionID, id)
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]string{"functionName": s.fn.Name, "functionVersion": s.fn.Version, "handler": s.fn.Handler})
}

// event waits for the extension's next event: SHUTDOWN at the drain for those that asked for
// it; the others wait until the environment ends.
func (s *Server) event(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	ext, ok := s.exts[r.Header.Get(headerExtensionID)]
	s.mu.Unlock()
	if !ok {
		refuse(w, http.StatusForbidden, "Extension.UnknownExtensionIdentifier", "unknown Lambda-Extension-Identifier")
		return
	}
	var shutdown <-chan struct{}
	if ext.shutdown {
		shutdown = s.shutdown
	}
	select {
	case <-shutdown:
	case <-r.Context().Done():
		return
	case <-s.closed:
		// The environment is gone: the connection drops, as when a sandbox ends.
		panic(http.ErrAbortHandler)
	}
	s.mu.Lock()
	deadline := s.deadline
	s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"eventType": eventShutdown, "shutdownReason": "spindown", "deadlineMs": deadline.UnixMilli()})
}

// Shutdown sends SHUTDOWN to the extensions that asked for it, with the time by which the
// environment ends.
func (s *Server) Shutdown(deadline time.Time) {
	s.mu.Lock()
	s.deadline = deadline
	s.mu.Unlock()
	s.once.shutdown.Do(func() { close(s.shutdown) })
}
