package sinks_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldhq/herald/analytics/auditwriter"
	"github.com/heraldhq/herald/analytics/migrations"
	"github.com/heraldhq/herald/internal/testenv"
	"github.com/heraldhq/herald/schemas"
	"github.com/heraldhq/herald/sinks/apns/emulator"
	"github.com/heraldhq/herald/sinks/sinktest"
	"github.com/heraldhq/herald/topics"
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
	bin := testenv.Herald(t)
	const partitions, deliveries, repeats = 4, 10_000, 1_000
	cat := testenv.Catalog(t, brokers, partitions)
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 2))

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

	var mu sync.Mutex
	running := map[string]*exec.Cmd{}
	start := func(id string) {
		logf, err := os.OpenFile(filepath.Join(dir, id+".log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(bin, "sink", "--channel", "apns", "--brokers", brokers[0], "--topic-prefix", cat.Options().Prefix,
			"--partitions", fmt.Sprint(partitions), "--replication", "1", "--instance-id", id,
			"--apns-host", em.URL(), "--apns-ca-file", caFile, "--apns-topic", "com.example.app",
			"--max-in-flight", "20", "--call-timeout", "1s", "--batch-interval", "20ms", "--transaction-timeout", "5s",
			"--max-attempts", "30", "--backoff-min", "20ms", "--backoff-max", "500ms")
		cmd.Stdout, cmd.Stderr = logf, logf
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		running[id] = cmd
		mu.Unlock()
		go func() { cmd.Wait(); logf.Close() }()
	}
	ids := []string{"s1", "s2"}
	for _, id := range ids {
		start(id)
	}
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range running {
			c.Process.Signal(syscall.SIGTERM)
		}
		for _, c := range running {
			c.Wait()
		}
	})

	// The commands, and repeats of some of them after their originals.
	cmds := make([]*schemas.DeliveryCommand, deliveries)
	var stream []*schemas.DeliveryCommand
	for i := range cmds {
		cmds[i] = deliveryCmd(fmt.Sprintf("n%d", i), fmt.Sprintf("dev%d", i%3000))
		stream = append(stream, cmds[i])
	}
	for _, j := range rng.Perm(deliveries)[:repeats] {
		stream = append(stream, cmds[j])
	}
	producer := testenv.Client(t, brokers, kgo.RecordPartitioner(cat.Partitioner()))
	produced := make(chan error, 1)
	go func() { produced <- produceAll(producer, cat, stream) }()

	// Kill and restart at random until every delivery has an outcome.
	outcomes := func() int {
		seen := map[string]bool{}
		for _, r := range testenv.ReadCommitted(t, brokers, cat.Name(topics.Outcomes)) {
			seen[string(r.Key)] = true
		}
		return len(seen)
	}
	kills := 0
	deadline := time.Now().Add(8 * time.Minute)
	for n := outcomes(); n < deliveries; n = outcomes() {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d deliveries have an outcome after %d kills; logs in %s", n, deliveries, kills, dir)
		}
		if kills < 12 {
			id := ids[rng.IntN(len(ids))]
			mu.Lock()
			running[id].Process.Signal(syscall.SIGKILL)
			mu.Unlock()
			kills++
			time.Sleep(time.Duration(200+rng.IntN(800)) * time.Millisecond)
			start(id)
		}
		time.Sleep(time.Duration(500+rng.IntN(1500)) * time.Millisecond)
	}
	if err := <-produced; err != nil {
		t.Fatal(err)
	}
	t.Logf("%d kills, %d pushes read by the emulator", kills, em.Total())

	a := sinktest.Read(t, brokers, cat)
	pushes := map[string][]emulator.Push{}
	for _, p := range em.Received() {
		pushes[p.DeliveryID] = append(pushes[p.DeliveryID], p)
	}
	var twice, ambiguousOnce, attempts int
	for _, c := range cmds {
		id := c.DeliveryID
		if n := len(a.Outcomes[id]); n != 1 || a.Outcomes[id][0].Status != schemas.OutcomeDelivered {
			t.Errorf("%s: outcomes %+v, want one delivered", id, a.Outcomes[id])
		}
		ambiguous := false
		for n, at := range a.Attempts[id] {
			attempts++
			if at.Attempt != n+1 {
				t.Errorf("%s: attempt record %d is numbered %d", id, n+1, at.Attempt)
			}
			ambiguous = ambiguous || at.Result == schemas.AttemptAmbiguous
		}
		got := pushes[id]
		switch {
		case len(got) == 0:
			t.Errorf("%s never reached the emulator", id)
		case len(got) > 1 && !ambiguous:
			t.Errorf("%s reached the emulator %d times with no ambiguous attempt in the audit", id, len(got))
		case len(got) > 1:
			twice++
		case ambiguous:
			ambiguousOnce++
		}
		for _, p := range got {
			if p.APNsID != c.APNsID || p.CollapseID != c.CollapseID {
				t.Errorf("%s: a push carried apns-id %s collapse id %s, want %s %s", id, p.APNsID, p.CollapseID, c.APNsID, c.CollapseID)
			}
		}
	}
	t.Logf("%d deliveries reached the emulator more than once (all audited ambiguous), %d had an ambiguous attempt and arrived once; %d attempts",
		twice, ambiguousOnce, attempts)

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
