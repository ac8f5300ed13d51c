package main

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/Shopify/toxiproxy/v2"
	"github.com/Shopify/toxiproxy/v2/collectors"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/heraldhq/herald/internal/testenv"
	"github.com/heraldhq/herald/schemas"
	"github.com/heraldhq/herald/sdk"
	"github.com/heraldhq/herald/topics"
)

// TestEveryRoleRidesOutABrokerAndClickHouseOutage runs the whole pipeline
// (api, two dedupe instances, route, the APNs sink, the audit writer) as
// processes on a broker of the test's own while producers send through the
// API with the SDK's retries. During the load the broker is SIGKILLed and
// started again twice, and ClickHouse becomes unreachable for a while (a
// proxy between the audit writer and the server refuses and cuts
// connections). No role is restarted by the test. It checks that no role
// exited, that every role reported not-ready while the broker was down and
// ready again after (the audit writer also while ClickHouse was away), that every acknowledged send has exactly one dedupe
// decision (accepted) and one route decision, that every delivery reached
// the provider, and that ClickHouse holds each decision exactly once.
func TestEveryRoleRidesOutABrokerAndClickHouseOutage(t *testing.T) {
	broker := testenv.StartOwnBroker(t)
	brokers := broker.Brokers()
	chAddr, db := testenv.ClickHouseDB(t)
	cat := testenv.Catalog(t, brokers, 2)
	bin := testenv.Herald(t)

	srv := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop())
	srv.Metrics.ProxyMetrics = collectors.NewProxyMetricCollectors()
	chProxy := toxiproxy.NewProxy(srv, "clickhouse", "127.0.0.1:0", chAddr)
	if err := chProxy.Start(); err != nil {
		t.Fatal(err)
	}
	defer chProxy.Stop()

	em, caFile := startAPNsEmulator(t, 100000)
	keys := apiKeyFile(t, "acme", "outage", "k-outage")
	kafka := []string{"--brokers", strings.Join(brokers, ","), "--topic-prefix", cat.Options().Prefix, "--partitions", "2", "--replication", "1"}
	id := strings.ReplaceAll(cat.Options().Prefix, ".", "")
	listen := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	ctx := context.Background()

	roles := map[string]*roleProc{}
	roles["api"] = startRole(t, bin, append([]string{"api", "--listen", listen, "--api-keys", keys, "--instance-id", "api-" + id}, kafka...)...)
	roles["api"].awaitReady(t)
	client := &sdk.Client{BaseURL: "http://" + listen, APIKey: "k-outage", MaxAttempts: 1000,
		AttemptTimeout: 20 * time.Second, MinBackoff: 100 * time.Millisecond, MaxBackoff: 2 * time.Second}

	// Devices first: the route stage reads them to their end before its
	// first decision. Every tenth recipient has an iPhone.
	const sends = 3000
	recipient := func(i int) string { return fmt.Sprintf("u%d", i) }
	for i := 0; i < sends; i += 10 {
		if _, err := client.RegisterDevice(ctx, recipient(i), "iphone", sdk.DeviceRegistration{Platform: "ios", Token: fmt.Sprintf("%064x", i)}); err != nil {
			t.Fatal(err)
		}
	}
	roles["dedupe-1"] = startRole(t, bin, append([]string{"dedupe", "--instance-id", "dedupe-1-" + id}, kafka...)...)
	roles["dedupe-2"] = startRole(t, bin, append([]string{"dedupe", "--instance-id", "dedupe-2-" + id}, kafka...)...)
	roles["route"] = startRole(t, bin, append([]string{"route", "--instance-id", "route-" + id}, kafka...)...)
	roles["sink"] = startRole(t, bin, append([]string{"sink", "--channel", "apns", "--instance-id", "sink-" + id,
		"--apns-host", em.URL(), "--apns-ca-file", caFile, "--apns-topic", "com.example.outage"}, kafka...)...)
	roles["audit-writer"] = startRole(t, bin, append([]string{"audit-writer", "--clickhouse-addr", chProxy.Listen, "--database", db, "--migrate",
		"--flush-interval", "200ms"}, kafka...)...)
	for _, p := range roles {
		p.awaitReady(t)
	}

	// The load: each notification sent twice with one idempotency key
	// (a client retry), by 16 concurrent producers.
	var acked atomic.Int64
	ids := make([]string, sends)
	errs := make(chan error, sends)
	var wg sync.WaitGroup
	next := atomic.Int64{}
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= sends {
					return
				}
				n := sdk.Notification{Type: "order.shipped", Recipients: []string{recipient(i)}, Title: "Shipped", Body: "On its way",
					IdempotencyKey: fmt.Sprintf("outage-%d", i)}
				var first string
				for try := range 2 {
					res, err := client.Send(ctx, n)
					if err != nil {
						errs <- fmt.Errorf("send %d (call %d): %w", i, try+1, err)
						return
					}
					if try == 0 {
						first = res.Notifications[0].ID
					} else if res.Notifications[0].ID != first {
						errs <- fmt.Errorf("send %d: the retry got id %s, the first call %s", i, res.Notifications[0].ID, first)
						return
					}
				}
				ids[i] = first
				acked.Add(1)
			}
		}()
	}
	awaitAcked := func(n int64) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Minute)
		for acked.Load() < n {
			if time.Now().After(deadline) {
				t.Fatalf("only %d sends acknowledged, waiting for %d", acked.Load(), n)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	notReady := func(p *roleProc) bool { code, _ := p.readyz(); return code != http.StatusOK }

	for outage := 1; outage <= 2; outage++ {
		awaitAcked(int64(outage) * sends / 4)
		t.Logf("outage %d: killing the broker after %d acknowledged sends", outage, acked.Load())
		broker.Kill()
		for _, p := range roles {
			p.await(t, "/readyz false while the broker is down", func() bool { return notReady(p) })
		}
		time.Sleep(5 * time.Second)
		broker.Start()
		t.Logf("outage %d: the broker is back", outage)
		for _, p := range roles {
			p.awaitReady(t)
		}
	}
	awaitAcked(3 * sends / 4)
	t.Logf("ClickHouse unreachable after %d acknowledged sends", acked.Load())
	chProxy.Stop()
	roles["audit-writer"].await(t, "/readyz false while ClickHouse is unreachable", func() bool { return notReady(roles["audit-writer"]) })
	time.Sleep(5 * time.Second)
	if err := chProxy.Start(); err != nil {
		t.Fatal(err)
	}
	roles["audit-writer"].awaitReady(t)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if t.Failed() {
		t.FailNow()
	}

	t.Run("no role exited", func(t *testing.T) {
		for name, p := range roles {
			select {
			case <-p.done:
				t.Errorf("herald %s exited:\n%s", name, p.output())
			default:
			}
		}
	})

	var decisions []schemas.Decision
	want := map[string]bool{}
	for _, id := range ids {
		want[id] = true
	}
	countOf := func(stage, outcome string) map[string]int {
		n := map[string]int{}
		for _, d := range decisions {
			if d.Stage == stage && (outcome == "" || d.Outcome == outcome) {
				n[d.NotificationID]++
			}
		}
		return n
	}
	roles["route"].await(t, "a route decision for every acknowledged send", func() bool {
		decisions = decisions[:0]
		for _, r := range testenv.ReadCommitted(t, brokers, cat.Name(topics.Decisions)) {
			var d schemas.Decision
			if err := schemas.Decode(r.Value, &d); err != nil {
				t.Fatal(err)
			}
			decisions = append(decisions, d)
		}
		return len(countOf("route", "")) >= len(want)
	})
	t.Run("every acknowledged send is accepted exactly once and routed exactly once", func(t *testing.T) {
		accepted, routed := countOf("dedupe", schemas.DecisionAccepted), countOf("route", "")
		for id := range want {
			if accepted[id] != 1 || routed[id] != 1 {
				t.Errorf("notification %s: accepted %d times, routed %d times; want 1 and 1", id, accepted[id], routed[id])
			}
		}
		if len(accepted) != len(want) {
			t.Errorf("%d notifications accepted, %d acknowledged", len(accepted), len(want))
		}
	})
	t.Run("every delivery reached the provider", func(t *testing.T) {
		var deliveries []string
		for _, d := range decisions {
			if d.Stage == "route" {
				for _, dl := range d.Deliveries {
					if dl.Channel == "apns" {
						deliveries = append(deliveries, dl.DeliveryID)
					}
				}
			}
		}
		if len(deliveries) != sends/10 {
			t.Fatalf("%d APNs deliveries routed, want %d", len(deliveries), sends/10)
		}
		roles["sink"].await(t, "every delivery at the emulator", func() bool {
			got := map[string]bool{}
			for _, p := range em.Received() {
				got[p.DeliveryID] = true
			}
			for _, d := range deliveries {
				if !got[d] {
					return false
				}
			}
			return true
		})
	})
	t.Run("ClickHouse holds every decision exactly once", func(t *testing.T) {
		conn, err := clickhouse.Open(&clickhouse.Options{Addr: []string{chAddr}})
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		var rows, distinct uint64
		roles["audit-writer"].await(t, "every decision in ClickHouse", func() bool {
			row := conn.QueryRow(ctx, fmt.Sprintf("SELECT count(), uniqExact(decision_id) FROM %s.decisions", db))
			if err := row.Scan(&rows, &distinct); err != nil {
				t.Fatal(err)
			}
			return distinct >= uint64(len(decisions))
		})
		if rows != distinct || distinct != uint64(len(decisions)) {
			t.Errorf("ClickHouse has %d decision rows, %d distinct; the topic has %d decisions", rows, distinct, len(decisions))
		}
	})
}
