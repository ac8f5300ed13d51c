package sinks_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"

	"github.com/heraldhq/herald/analytics/auditwriter"
	"github.com/heraldhq/herald/analytics/migrations"
	"github.com/heraldhq/herald/internal/testenv"
	"github.com/heraldhq/herald/schemas"
	"github.com/heraldhq/herald/sinks/apns/emulator"
	"github.com/heraldhq/herald/sinks/sinktest"
)

// TestEachDeliveryOnceUnlessAuditedAmbiguousThroughSIGKILLs runs two
// `herald sink --channel apns` processes over 10k deliveries (and a repeat
// of 1k of their commands, as a replayed route stage would write), SIGKILLs
// them at random, while the emulator resets 2 % of the streams after
// reading the request and answers 1 % too late. Then: every delivery
// reached the emulator at least once, more than once only if the audit has
// an ambiguous attempt for it, always with the command's apns-id and
// collapse id; it has exactly one outcome; its attempts are numbered 1..n
// once each, in Kafka and in ClickHouse.
func TestEachDeliveryOnceUnlessAuditedAmbiguousThroughSIGKILLs(t *testing.T) {
	brokers := testenv.Kafka(t)
	chAddr, database := testenv.ClickHouseDB(t)
	const partitions, deliveries, repeats = 4, 10_000, 1_000
	cat := testenv.Catalog(t, brokers, partitions)
	dir := t.TempDir()

	em, err := emulator.Start(emulator.Options{Latency: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { em.Close() })
	em.SetFaults(emulator.Faults{ResetRate: 0.02, SlowRate: 0.01, SlowDelay: 5 * time.Second})
	caFile := filepath.Join(dir, "emulator.pem")
	if err := os.WriteFile(caFile, em.CertPEM(), 0o644); err != nil {
		t.Fatal(err)
	}

	// The audit writer copies attempts and outcomes into ClickHouse.
	conn, err := clickhouse.Open(&clickhouse.Options{Addr: []string{chAddr}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ctx := context.Background()
	if _, err := migrations.Apply(ctx, conn, migrations.Options{Database: database, AppliedBy: t.Name()}); err != nil {
		t.Fatal(err)
	}
	awCtx, stopAW := context.WithCancel(ctx)
	var awDone sync.WaitGroup
	awDone.Add(1)
	go func() {
		defer awDone.Done()
		if err := auditwriter.Run(awCtx, auditwriter.Options{Brokers: brokers, Catalog: cat, ClickHouse: conn, Database: database,
			FlushInterval: 200 * time.Millisecond}); err != nil && awCtx.Err() == nil {
			t.Errorf("audit writer: %v", err)
		}
	}()
	t.Cleanup(func() { stopAW(); awDone.Wait() })

	// The commands; sinktest.Crash adds repeats of some of them after their
	// originals, runs two sink processes and SIGKILLs them at random until
	// every delivery has an outcome.
	cmds := make([]*schemas.DeliveryCommand, deliveries)
	for i := range cmds {
		cmds[i] = deliveryCmd(fmt.Sprintf("n%d", i), fmt.Sprintf("dev%d", i%3000))
	}
	a := sinktest.Crash{Channel: "apns", Commands: cmds, Repeats: repeats, Kills: 12,
		Args: []string{"--apns-host", em.URL(), "--apns-ca-file", caFile, "--apns-topic", "com.example.app"}}.Run(t, brokers, cat)
	t.Logf("%d pushes read by the emulator", em.Total())

	arrivals := map[string]int{}
	byDelivery := map[string]*schemas.DeliveryCommand{}
	for _, c := range cmds {
		byDelivery[c.DeliveryID] = c
	}
	for _, p := range em.Received() {
		arrivals[p.DeliveryID]++
		if c := byDelivery[p.DeliveryID]; c != nil && (p.APNsID != c.APNsID || p.CollapseID != c.CollapseID) {
			t.Errorf("%s: a push carried apns-id %s collapse id %s, want %s %s", c.DeliveryID, p.APNsID, p.CollapseID, c.APNsID, c.CollapseID)
		}
	}
	twice := sinktest.CheckOnce(t, a, cmds, arrivals)
	attempts := 0
	for _, c := range cmds {
		attempts += len(a.Attempts[c.DeliveryID])
	}
	t.Logf("%d deliveries reached the emulator more than once (all audited ambiguous); %d attempts", twice, attempts)

	// ClickHouse: exactly one row per attempt once the writer caught up.
	var rows, distinct uint64
	for end := time.Now().Add(2 * time.Minute); ; time.Sleep(500 * time.Millisecond) {
		row := conn.QueryRow(ctx, "SELECT count(), uniqExact(attempt_id) FROM `"+database+"`.attempts")
		if err := row.Scan(&rows, &distinct); err != nil {
			t.Fatal(err)
		}
		if int(distinct) >= attempts || time.Now().After(end) {
			break
		}
	}
	if int(rows) != attempts || int(distinct) != attempts {
		t.Errorf("ClickHouse holds %d attempt rows (%d distinct attempts), Kafka %d attempts", rows, distinct, attempts)
	}
}
