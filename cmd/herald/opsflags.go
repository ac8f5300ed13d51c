package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/heraldhq/herald/internal/metrics"
	"github.com/heraldhq/herald/internal/ops"
)

// opsFlags configure the operations endpoint every long-running role
// serves: /metrics, /livez, /readyz (see internal/ops).
type opsFlags struct{ addr string }

func (o *opsFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&o.addr, "metrics-addr", "", "serve /metrics (Prometheus), /livez and /readyz on this address, e.g. :9464 (empty: not served)")
	listenAddr(fs, "metrics-addr", &o.addr, true)
}

// serve starts the endpoint when --metrics-addr is set, with the role's
// readiness checks; stop closes it (a no-op when not served).
func (o *opsFlags) serve(checks ...ops.Check) (stop func(), err error) {
	if o.addr == "" {
		return func() {}, nil
	}
	s, err := ops.Serve(o.addr, ops.Handler(metrics.Default, checks...), slog.Default())
	if err != nil {
		return nil, err
	}
	return func() {
		if err := s.Close(); err != nil {
			slog.Warn("closing the operations endpoint", "err", err)
		}
	}, nil
}

// runProbe implements `herald probe URL`: exit 0 when URL answers 200 within
// --timeout, 1 otherwise. It is the container healthcheck of every role
// (the image has no shell or curl):
//
//	herald probe http://127.0.0.1:9464/readyz
func runProbe(ctx context.Context, args []string, stdout io.Writer) error {
	fs := newFlagSet("probe")
	timeout := fs.Duration("timeout", 3*time.Second, "how long to wait for the answer")
	words, err := parseFlagsAndWords(fs, args)
	if err != nil {
		return err
	}
	if len(words) != 1 {
		return fmt.Errorf("%w: herald probe URL (e.g. http://127.0.0.1:9464/readyz), got %d arguments", errUsage, len(words))
	}
	url := words[0]
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("probe: %w", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("probe: %s: %s %s", url, resp.Status, strings.TrimSpace(string(body)))
	}
	_, err = stdout.Write(body)
	return err
}
