// Command seedsvc serves the seed design of bench/seedsvc, a benchmark
// baseline and no part of herald: POST /v1/notifications as herald api
// answers it, one PostgreSQL transaction per send (a unique sent-set
// insert … on conflict do nothing returning id, plus an outbox row when
// new). `scripts/bench-api --compare` runs it beside herald with the same
// load generator, once with synchronous_commit=on and once with off.
//
//	go run ./scripts/bench-api.d/seedsvc --listen 127.0.0.1:8081 --api-keys keys \
//	  --postgres "$HERALD_TEST_POSTGRES" --schema seedsvc_1 --synchronous-commit off --drop-on-exit
//
// It creates the schema's tables when missing, opens every connection of
// its pool before it listens (so that no backend starts under load), and
// with --drop-on-exit drops the schema when it is stopped (SIGINT or
// SIGTERM). GET /stats answers the accepted and duplicate counts.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/heraldhq/herald/bench/seedsvc"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "seedsvc:", err)
		os.Exit(1)
	}
}

func run() error {
	listen := flag.String("listen", "127.0.0.1:8081", "address to answer on")
	dsn := flag.String("postgres", os.Getenv("HERALD_TEST_POSTGRES"), "PostgreSQL DSN (default $HERALD_TEST_POSTGRES)")
	schema := flag.String("schema", "seedsvc", "schema of the sent-set and outbox tables (created when missing)")
	syncCommit := flag.String("synchronous-commit", "on", "synchronous_commit of every connection: on or off")
	conns := flag.Int("max-conns", 64, "connections in the pool, all opened before listening")
	keysFile := flag.String("api-keys", "", "herald's key file: one tenant:name:sha256hex per line (required)")
	statement := flag.String("statement", string(seedsvc.StatementTx), "tx: BEGIN, insert, outbox insert, COMMIT; cte: both inserts in one statement")
	drop := flag.Bool("drop-on-exit", false, "drop the schema when stopped")
	flag.Parse()
	if *dsn == "" || *keysFile == "" || *conns < 1 {
		return errors.New("--postgres, --api-keys and a positive --max-conns are required")
	}
	kb, err := os.ReadFile(*keysFile)
	if err != nil {
		return err
	}
	keys, err := seedsvc.ParseKeys(string(kb))
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	pool, err := seedsvc.Connect(ctx, *dsn, *syncCommit, *conns)
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := seedsvc.Setup(ctx, pool, *schema); err != nil {
		return err
	}
	if *drop {
		defer func() {
			dctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := seedsvc.Drop(dctx, pool, *schema); err != nil {
				slog.Warn("seedsvc: dropping the schema failed", "schema", *schema, "err", err)
			}
		}()
	}
	srv, err := seedsvc.New(seedsvc.Config{Pool: pool, Schema: *schema, Keys: keys, Statement: seedsvc.Statement(*statement)})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	hs := &http.Server{Handler: srv, ReadHeaderTimeout: 10 * time.Second}
	slog.Info("seedsvc: answering", "addr", ln.Addr().String(), "schema", *schema, "synchronous_commit", *syncCommit, "conns", *conns)
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := hs.Shutdown(sctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	slog.Info("seedsvc: stopped", "accepted", srv.Stats().Accepted, "duplicates", srv.Stats().Duplicates)
	return nil
}
