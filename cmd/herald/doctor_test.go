package main

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldhq/herald/analytics/migrations"
	"github.com/heraldhq/herald/internal/testenv"
	"github.com/heraldhq/herald/topics"
)

// doctorOn runs herald doctor against brokers with a catalog of prefix (2
// partitions, replication 1), answering its questions with stdin.
func doctorOn(brokers []string, prefix, stdin string, args ...string) (int, string) {
	doctorStdin = strings.NewReader(stdin)
	defer func() { doctorStdin = nil }()
	var out, errOut bytes.Buffer
	args = append([]string{"doctor", "--brokers", brokers[0], "--topic-prefix", prefix, "--partitions", "2", "--replication", "1"}, args...)
	code := run(context.Background(), args, &out, &errOut)
	return code, out.String() + errOut.String()
}

// awaitDoctor runs herald doctor until it exits with code and prints every
// line of want (metadata and configs propagate asynchronously), within the
// guard.
func awaitDoctor(t *testing.T, brokers []string, prefix, stdin string, code int, want []string, args ...string) string {
	t.Helper()
	deadline := time.Now().Add(testenv.Guard())
	for {
		got, out := doctorOn(brokers, prefix, stdin, args...)
		missing := ""
		for _, w := range want {
			if !strings.Contains(out, w) {
				missing = w
				break
			}
		}
		if got == code && missing == "" {
			return out
		}
		if time.Now().After(deadline) {
			t.Fatalf("herald doctor %v: exit %d, want %d; missing %q in:\n%s", args, got, code, missing, out)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// doctorCatalog creates a herald catalog under a new prefix (2
// partitions, replication 1) on the real broker, deleted when t ends.
func doctorCatalog(t *testing.T) (brokers []string, prefix string, cat *topics.Catalog, adm *kadm.Client, ctx context.Context) {
	t.Helper()
	brokers = testenv.Kafka(t)
	prefix = fmt.Sprintf("d%08x.herald.", rand.Uint32())
	cat = topics.New(topics.Options{Prefix: prefix, Partitions: 2, Replication: 1})
	adm = kadm.NewClient(testenv.Client(t, brokers))
	testenv.DeleteCatalogOnCleanup(t, adm, cat)
	ctx = testenv.Guarded(t)
	if _, err := cat.Create(ctx, adm); err != nil {
		t.Fatal(err)
	}
	return brokers, prefix, cat, adm, ctx
}

// TestDoctorOnTheRealBroker: a catalog as herald topics creates it is ok on
// every check of the topics; a topic misconfigured by hand is a FAIL that
// names it and says what to do.
func TestDoctorOnTheRealBroker(t *testing.T) {
	brokers, prefix, cat, adm, ctx := doctorCatalog(t)
	set := func(topic, key, value string) {
		t.Helper()
		if _, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Op: kadm.SetConfig, Name: key, Value: &value}}, topic); err != nil {
			t.Fatal(err)
		}
	}
	t.Run("a clean catalog is ok on every check of brokers and topics, and doctor exits 0", func(t *testing.T) {
		awaitDoctor(t, brokers, prefix, "", 0, []string{
			"ok    brokers:", fmt.Sprintf("ok    topics: all %d topics", len(cat.Topics())), "ok    replication:", "ok    min.insync.replicas:", "ok    transaction state log:",
			"ok    unclean leader election:", "ok    topic configs:", "ok    hanging transactions:", "doctor: no check failed",
		})
	})
	t.Run("min.insync.replicas above a topic's replication is a FAIL naming the topic and the fix", func(t *testing.T) {
		set(prefix+"seen", "min.insync.replicas", "2")
		awaitDoctor(t, brokers, prefix, "", 1, []string{
			"FAIL  min.insync.replicas: " + prefix + "seen has min.insync.replicas 2 above its replication 1: no transaction can write to it; kafka-configs",
		})
		set(prefix+"seen", "min.insync.replicas", "1")
	})
	t.Run("unclean leader election on a herald topic is a FAIL naming it", func(t *testing.T) {
		set(prefix+"accepted", "unclean.leader.election.enable", "true")
		awaitDoctor(t, brokers, prefix, "", 1, []string{"FAIL  unclean leader election: " + prefix + "accepted has unclean.leader.election.enable=true"})
		set(prefix+"accepted", "unclean.leader.election.enable", "false")
	})
	t.Run("a config drifted from the catalog is a FAIL naming the topic, the config and the fix", func(t *testing.T) {
		set(prefix+"route", "cleanup.policy", "delete")
		awaitDoctor(t, brokers, prefix, "", 1, []string{
			"FAIL  topic configs: " + prefix + `route has cleanup.policy="delete", the catalog wants "compact": herald topics create --fix-configs`,
		})
		set(prefix+"route", "cleanup.policy", "compact")
	})
	t.Run("after the fixes the catalog is ok again", func(t *testing.T) {
		awaitDoctor(t, brokers, prefix, "", 0, []string{"doctor: no check failed"})
	})
	t.Run("with --clickhouse-addr a database without migrations is a FAIL saying to run herald migrate; migrated, it is ok and the audit lag is listed", func(t *testing.T) {
		addr, db := testenv.ClickHouseDB(t)
		ch := []string{"--clickhouse-addr", addr, "--database", db}
		all, err := migrations.All()
		if err != nil {
			t.Fatal(err)
		}
		latest := fmt.Sprintf("%04d_%s", all[len(all)-1].Version, all[len(all)-1].Name)
		awaitDoctor(t, brokers, prefix, "", 1, []string{fmt.Sprintf("FAIL  clickhouse migrations: database %s lacks %d migration(s) (0001_audit_tables", db, len(all))}, ch...)
		var out, errOut bytes.Buffer
		if code := run(context.Background(), []string{"migrate", "--clickhouse-addr", addr, "--database", db}, &out, &errOut); code != 0 {
			t.Fatalf("herald migrate: exit %d: %s%s", code, out.String(), errOut.String())
		}
		awaitDoctor(t, brokers, prefix, "", 0, []string{"ok    clickhouse migrations: database " + db + " is at " + latest + ", the latest",
			"ok    audit writer lag: offsets not yet in ClickHouse: " + prefix + "attempts 0, " + prefix + "decisions 0"}, ch...)
	})
}

// TestDoctorFindsAndAbortsAHangingTransaction: a producer that begins a
// transaction on herald.seen, writes and is abandoned holds the partition's
// last stable offset. Within its timeout doctor reports it open; past
// --hanging-after it is a FAIL; --abort-hanging asks, and aborts it only
// on a yes, after which the last stable offset reaches the high watermark.
func TestDoctorFindsAndAbortsAHangingTransaction(t *testing.T) {
	brokers, prefix, _, adm, ctx := doctorCatalog(t)
	txnID := "abandoned-" + prefix
	p := testenv.Client(t, brokers, kgo.TransactionalID(txnID), kgo.TransactionTimeout(time.Minute),
		kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err := p.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := p.ProduceSync(ctx, &kgo.Record{Topic: prefix + "seen", Partition: 1, Key: []byte("k"), Value: []byte("v")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	// The producer is abandoned here: its transaction stays open.
	held := prefix + "seen/1 held by producer "

	t.Run("an open transaction within its timeout is reported open, not hanging", func(t *testing.T) {
		awaitDoctor(t, brokers, prefix, "", 0, []string{"ok    hanging transactions: 1 transaction(s) open, none past its limit (the oldest, " + held})
	})
	t.Run("one open longer than --hanging-after is a FAIL naming the partition, the producer and its transactional id", func(t *testing.T) {
		awaitDoctor(t, brokers, prefix, "", 1, []string{"FAIL  hanging transactions: " + held, "(transactional id " + txnID + ", Ongoing)",
			"the last stable offset is stuck at 0 below 1", "herald doctor --abort-hanging"}, "--hanging-after", "1s")
	})
	t.Run("--abort-hanging answered no aborts nothing", func(t *testing.T) {
		out := awaitDoctor(t, brokers, prefix, "n\n", 1, []string{"abort the transaction of " + held, "not aborted"}, "--hanging-after", "1s", "--abort-hanging")
		if strings.Contains(out, "aborted the transaction") {
			t.Fatalf("aborted after a no:\n%s", out)
		}
	})
	t.Run("--abort-hanging answered yes aborts it, and doctor exits 0", func(t *testing.T) {
		awaitDoctor(t, brokers, prefix, "y\n", 0, []string{"aborted the transaction of " + held}, "--hanging-after", "1s", "--abort-hanging")
		lso, err := adm.ListCommittedOffsets(ctx, prefix+"seen")
		if err != nil {
			t.Fatal(err)
		}
		if o, _ := lso.Lookup(prefix+"seen", 1); o.Offset < 2 {
			t.Fatalf("last stable offset %d after the abort, want past the record and its abort marker (2)", o.Offset)
		}
	})
	t.Run("afterwards no transaction is open", func(t *testing.T) {
		awaitDoctor(t, brokers, prefix, "", 0, []string{"ok    hanging transactions: every herald partition's last stable offset is at its high watermark"})
	})
}

// TestAnAbortMarkerReleasesAPartitionHeldByAnOpenTransaction: the way
// doctor aborts a transaction no coordinator knows (KIP-664's): an abort
// marker for the producer written to the partition directly. Shown on a
// transaction the coordinator does know (none can be made unknown on a
// healthy broker): the marker releases the partition all the same.
func TestAnAbortMarkerReleasesAPartitionHeldByAnOpenTransaction(t *testing.T) {
	brokers, prefix, cat, adm, ctx := doctorCatalog(t)
	p := testenv.Client(t, brokers, kgo.TransactionalID("marker-"+prefix), kgo.TransactionTimeout(time.Minute),
		kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err := p.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := p.ProduceSync(ctx, &kgo.Record{Topic: prefix + "accepted", Partition: 0, Value: []byte("v")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	view, err := readCluster(ctx, adm, cat)
	if err != nil {
		t.Fatal(err)
	}
	txns, err := openTransactions(ctx, adm, cat, view)
	if err != nil || len(txns) != 1 || txns[0].Topic != prefix+"accepted" || txns[0].Partition != 0 {
		t.Fatalf("open transactions %+v, %v; want one on %saccepted/0", txns, err, prefix)
	}
	if err := writeAbortMarker(ctx, adm, txns[0]); err != nil {
		t.Fatal(err)
	}
	if err := awaitReleased(ctx, adm, txns[0]); err != nil {
		t.Fatal(err)
	}
	lso, err := adm.ListCommittedOffsets(ctx, prefix+"accepted")
	if err != nil {
		t.Fatal(err)
	}
	if o, _ := lso.Lookup(prefix+"accepted", 0); o.Offset < 2 {
		t.Fatalf("last stable offset %d after the marker, want past the record and the marker (2)", o.Offset)
	}
}
