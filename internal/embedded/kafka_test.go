package embedded

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldhq/herald/topics"
)

// TestReadCommittedNeverSeesAbortedRecordsWithClientOpts covers defect 1:
// transactions larger than one fetch, committed and aborted in turn, across
// every partition; a read_committed reader with ClientOpts sees exactly the
// committed ones.
func TestReadCommittedNeverSeesAbortedRecordsWithClientOpts(t *testing.T) {
	k, err := StartKafka(t.TempDir(), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	ctx := context.Background()
	const topic = "t"
	adm, err := kgo.NewClient(kgo.SeedBrokers(k.Brokers()...))
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	if _, err := kadm.NewClient(adm).CreateTopic(ctx, Partitions, 1, nil, topic); err != nil {
		t.Fatal(err)
	}

	p, err := kgo.NewClient(kgo.SeedBrokers(k.Brokers()...), kgo.TransactionalID("w1"), kgo.DefaultProduceTopic(topic),
		kgo.RecordPartitioner(kgo.RoundRobinPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	value := []byte(strings.Repeat("x", 32<<10))
	committed := 0
	for txn := 0; txn < 8; txn++ {
		if err := p.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 64; i++ { // 2 MiB per transaction, 512 KiB per partition
			rec := &kgo.Record{Key: []byte(fmt.Sprintf("%d-%d", txn, i)), Value: value}
			if err := p.ProduceSync(ctx, rec).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
		commit := txn%2 == 0
		if err := p.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
			t.Fatal(err)
		}
		if commit {
			committed += 64
		}
	}

	c, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(k.Brokers()...), kgo.ConsumeTopics(topic),
		kgo.FetchIsolationLevel(kgo.ReadCommitted())}, ClientOpts()...)...)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	got := 0
	deadline := time.Now().Add(30 * time.Second)
	for got < committed && time.Now().Before(deadline) {
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		fs := c.PollFetches(pctx)
		cancel()
		fs.EachRecord(func(r *kgo.Record) {
			var txn int
			fmt.Sscanf(string(r.Key), "%d-", &txn)
			if txn%2 == 1 {
				t.Errorf("read_committed saw record %s of an aborted transaction", r.Key)
			}
			got++
		})
	}
	// One more poll: nothing beyond the committed records may arrive.
	pctx, cancel := context.WithTimeout(ctx, time.Second)
	got += c.PollFetches(pctx).NumRecords()
	cancel()
	if got != committed {
		t.Fatalf("read %d records, want the %d committed", got, committed)
	}
}

func TestCatalogOptionsKeepTheSeenSetUncompactedBeyondEveryWindow(t *testing.T) {
	window := 48 * time.Hour
	cat := topics.New(CatalogOptions(window))
	for _, tp := range cat.Topics() {
		if tp.Name != cat.Name(topics.Seen) {
			continue
		}
		if tp.Configs["cleanup.policy"] != "delete" {
			t.Fatalf("seen-set cleanup.policy = %q on kfake, want delete (defect 3)", tp.Configs["cleanup.policy"])
		}
		var ms int64
		fmt.Sscan(tp.Configs["retention.ms"], &ms)
		if time.Duration(ms)*time.Millisecond <= window {
			t.Fatalf("seen-set retention %d ms does not outlive the %v window", ms, window)
		}
		return
	}
	t.Fatal("no seen topic in the catalog")
}

func TestTransactionalSuffixDiffersPerStart(t *testing.T) {
	a := TransactionalSuffix()
	time.Sleep(time.Microsecond)
	if b := TransactionalSuffix(); a == b {
		t.Fatalf("two starts share the suffix %q (defect 2)", a)
	}
}
