// Command httpworker is an example HTTP worker for `watchbot listen --http-worker`, used by
// `make demo-http`: a plain net/http application of the kind Elastic Beanstalk's worker
// environments run. It listens on -addr (a free loopback port by default, printed as
// "listening on ADDR"), answers GET /healthz, and decides each POSTed message by its body's
// prefix, as scripts/examples/worker does:
//
//	ok-*      200                                   -> deleted
//	flaky-*   500 on its first receive, then 200    -> retried after the backoff, then deleted
//	reject-*  200 with {"action":"dead-letter",...} -> sent to the DLQ with the reason
//	poison-*  500 every time                        -> moved to the DLQ by the redrive policy
//	slow-*    two seconds, then 200
package main

import (
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"strings"
	"time"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:0", "address to listen on")
	flag.Parse()
	l, err := net.Listen("tcp", *addr)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("listening on %s\n", l.Addr())
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok\n") })
	mux.HandleFunc("POST /", handle)
	log.Fatal(http.Serve(l, mux))
}

func handle(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	msg := string(body)
	fmt.Fprintf(os.Stderr, "working on %s (receive %s): %s\n", r.Header.Get("X-Aws-Sqsd-Msgid"), r.Header.Get("X-Aws-Sqsd-Receive-Count"), msg)
	switch {
	case strings.HasPrefix(msg, "ok-"):
	case strings.HasPrefix(msg, "flaky-"):
		if r.Header.Get("X-Aws-Sqsd-Receive-Count") == "1" {
			http.Error(w, "transient failure, try again", http.StatusInternalServerError)
		}
	case strings.HasPrefix(msg, "reject-"):
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"action":"dead-letter","reason":"this message can never succeed"}`)
	case strings.HasPrefix(msg, "poison-"):
		http.Error(w, "crashing on "+msg, http.StatusInternalServerError)
	case strings.HasPrefix(msg, "slow-"):
		time.Sleep(2 * time.Second)
	default:
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"action":"dead-letter","reason":"unknown message"}`)
	}
}
