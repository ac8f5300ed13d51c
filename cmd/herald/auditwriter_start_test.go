package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/Shopify/toxiproxy/v2"
	"github.com/Shopify/toxiproxy/v2/collectors"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/heraldhq/herald/analytics/migrations"
	"github.com/heraldhq/herald/internal/testenv"
	"github.com/heraldhq/herald/topics"
)

// The audit writer, SIGKILLed and restarted by scripts/chaos while the
// ClickHouse server was down (killed by the same suite), exited at start
// 26 times in a row: its one ping failed. Here the server's address first
// takes connections and closes them (a server not up yet), then leads to
// the real ClickHouse: the audit writer waits and applies its migrations
// instead of exiting.
func TestTheAuditWriterStartsWhenClickHouseComesUpAfterIt(t *testing.T) {
	brokers := testenv.Kafka(t)
	chAddr, db := testenv.ClickHouseDB(t)

	// Down: every connection is closed at once.
	down, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := down.Addr().String()
	var refused atomic.Int64
	go func() {
		for {
			c, err := down.Accept()
			if err != nil {
				return
			}
			refused.Add(1)
			c.Close()
		}
	}()

	cat := topics.New(topics.Options{Prefix: fmt.Sprintf("awstart%d.", time.Now().UnixNano()%1_000_000), Partitions: 1, Replication: 1})
	ctx, cancel := context.WithCancel(testenv.Guarded(t))
	defer cancel()
	adm := kadm.NewClient(testenv.Client(t, brokers))
	testenv.DeleteCatalogOnCleanup(t, adm, cat)
	if _, err := cat.Create(ctx, adm); err != nil {
		t.Fatal(err)
	}
	ops := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	exited := make(chan error, 1)
	go func() {
		exited <- runAuditWriter(ctx, []string{"--clickhouse-addr", addr, "--database", db, "--migrate",
			"--brokers", strings.Join(brokers, ","), "--topic-prefix", cat.Options().Prefix, "--partitions", "1", "--replication", "1",
			"--metrics-addr", ops}, io.Discard)
	}()

	// Two connections refused: it tried again rather than exiting.
	for refused.Load() < 2 {
		select {
		case err := <-exited:
			t.Fatalf("the audit writer exited while ClickHouse was down: %v", err)
		case <-time.After(50 * time.Millisecond):
		}
	}
	down.Close()

	// Up: the same address leads to the real server.
	srv := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop())
	srv.Metrics.ProxyMetrics = collectors.NewProxyMetricCollectors()
	proxy := toxiproxy.NewProxy(srv, "clickhouse", addr, chAddr)
	if err := proxy.Start(); err != nil {
		t.Fatal(err)
	}
	defer proxy.Stop()

	// Ready: migrated, connected to Kafka and ClickHouse.
	for !ready(ops) {
		select {
		case err := <-exited:
			t.Fatalf("the audit writer exited after ClickHouse came up: %v", err)
		case <-time.After(100 * time.Millisecond):
		}
	}
	direct, err := clickhouse.Open(&clickhouse.Options{Addr: []string{chAddr}})
	if err != nil {
		t.Fatal(err)
	}
	defer direct.Close()
	var applied uint64
	if err := direct.QueryRow(context.Background(), "SELECT count() FROM `"+db+"`."+migrations.Table).Scan(&applied); err != nil || applied == 0 {
		t.Fatalf("migrations applied: %d, %v", applied, err)
	}
	cancel()
	if err := <-exited; err != nil && ctx.Err() == nil {
		t.Fatalf("the audit writer: %v", err)
	}
}

func ready(addr string) bool {
	resp, err := http.Get("http://" + addr + "/readyz")
	if err != nil {
		return false
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}
