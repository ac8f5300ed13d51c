// Command noop is the floor `scripts/bench-api --floor` measures herald's
// API against: a Go net/http server that answers POST /v1/notifications
// as `herald api` does on the wire (it reads the body, answers 202 with a
// JSON body of the same shape and a Location header) and does nothing
// else: no parsing, no Kafka, no access log, no metrics. Run beside the
// real roles on the same cores with the same load generator, its sends/s
// and CPU per request are what this machine's HTTP stack and load
// generator allow before herald does any work.
//
//	go run ./scripts/bench-api.d/noop --listen 127.0.0.1:8080
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
)

// answer is a send's answer as `herald api` writes it for one recipient
// without Prefer: wait (sdk.SendResult).
const answer = `{"requestId":"0123456789abcdef0123456789abcdef","notifications":[{"id":"0123456789abcdef0123456789abcdef",` +
	`"recipient":"u1","status":"pending"}],"deliveries":[],"skipped":[]}` + "\n"

func main() {
	listen := flag.String("listen", "127.0.0.1:8080", "address to answer on")
	flag.Parse()
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/notifications", func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.Copy(io.Discard, http.MaxBytesReader(w, r.Body, 1<<20)); err != nil {
			http.Error(w, `{"title":"body too large"}`, http.StatusRequestEntityTooLarge)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Location", "/v1/notifications/0123456789abcdef0123456789abcdef")
		w.WriteHeader(http.StatusAccepted)
		io.WriteString(w, answer)
	})
	slog.Info("noop: answering", "addr", *listen)
	if err := http.ListenAndServe(*listen, mux); err != nil && !errors.Is(err, http.ErrServerClosed) {
		fmt.Fprintln(os.Stderr, "noop:", err)
		os.Exit(1)
	}
}
