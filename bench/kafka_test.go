package bench

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldhq/herald/internal/testenv"
	"github.com/heraldhq/herald/processors/dedupe"
	"github.com/heraldhq/herald/schemas"
)

func TestHeraldBackendOnTheRealBroker(t *testing.T) {
	brokers := testenv.Kafka(t)
	s := generate(t, StreamOptions{Requests: 5000, RepeatRatio: 0.3, Seed: 11})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	rows, err := RunKafka(ctx, s, KafkaOptions{
		Brokers: brokers, Partitions: 3, Replication: 1, TxnRecords: []int{500}, Compression: []string{"none", "zstd"}, Instances: []int{1, 2},
		Formats:       []schemas.Format{schemas.FormatBinary, schemas.FormatJSON},
		BatchInterval: 100 * time.Millisecond, Policy: dedupe.DefaultPolicy(), Timeout: 3 * time.Minute, Ceiling: true, SegmentBytes: 1 << 30,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Run("one produce row, one row per codec, format, instance count and transaction size, and a copy loop row per codec and size", func(t *testing.T) {
		if len(rows) != 11 || rows[0].Decides() {
			t.Fatalf("rows %+v", rows)
		}
		want := []struct {
			variant   string
			instances int
			copyLoop  bool
		}{
			{"txn ≤ 500, none, records v2", 1, false}, {"txn ≤ 500, none, records v2", 2, false},
			{"txn ≤ 500, none, records v1", 1, false}, {"txn ≤ 500, none, records v1", 2, false}, {"txn ≤ 500, none", 1, true},
			{"txn ≤ 500, zstd, records v2", 1, false}, {"txn ≤ 500, zstd, records v2", 2, false},
			{"txn ≤ 500, zstd, records v1", 1, false}, {"txn ≤ 500, zstd, records v1", 2, false}, {"txn ≤ 500, zstd", 1, true},
		}
		for i, w := range want {
			r := rows[i+1]
			shared := strings.Contains(r.Note, "2 instances in one process")
			isCopy := strings.HasPrefix(r.Variant, "exactly-once copy loop (ceiling)")
			if r.Decides() == w.copyLoop || isCopy != w.copyLoop || !strings.HasSuffix(r.Variant, w.variant) || shared != (w.instances == 2) || r.Records != 5000 {
				t.Errorf("row %d: %q / %q (%d records), want %q by %d instance(s), copy loop %v", i+1, r.Variant, r.Note, r.Records, w.variant, w.instances, w.copyLoop)
			}
		}
	})
	t.Run("every run accepts exactly the distinct notifications", func(t *testing.T) {
		if err := CheckAccepted(s, rows); err != nil {
			t.Fatal(err)
		}
		for _, r := range rows[1:] {
			if !r.Decides() {
				continue // the copy loop: it checks its own copies
			}
			if r.Accepted != 3500 || r.Decisions != 5000 {
				t.Errorf("%s: %d accepted, %d decisions; want 3500 and 5000", r.Variant, r.Accepted, r.Decisions)
			}
			if !strings.Contains(r.Note, "seen-set topic 1.55 entries per request") || !strings.Contains(r.Note, "0.00 of them tombstones") {
				t.Errorf("%s: %s; want 1.55 seen-set entries a request (3500 originals with two keys, 750 second calls with one), no tombstones", r.Variant, r.Note)
			}
		}
	})
	t.Run("the benchmark topics are deleted afterwards", func(t *testing.T) {
		adm := kadm.NewClient(testenv.Client(t, brokers))
		ts, err := adm.ListTopics(ctx)
		if err != nil {
			t.Fatal(err)
		}
		// Other benchmark runs may share the broker: look for this run's
		// requests topics only, by their record count.
		for name := range ts {
			if len(name) > 13 && name[:13] == "herald-bench-" {
				ends, err := adm.ListEndOffsets(ctx, name)
				if err != nil {
					continue
				}
				var n int64
				ends.Each(func(o kadm.ListedOffset) { n += o.Offset })
				if n == int64(len(s.Requests)) {
					t.Errorf("topic %s with %d records is still there", name, n)
				}
			}
		}
	})
}

func TestHeraldBackendOnAStreamWhoseKeysExpire(t *testing.T) {
	brokers := testenv.Kafka(t)
	// A second apart, 50 minutes of stream time; every repeat within 75
	// requests of its original, the windows 10 minutes.
	s := generate(t, StreamOptions{Requests: 3000, RepeatRatio: 0.3, Seed: 9, MaxLag: 50, Step: time.Second})
	p := dedupe.DefaultPolicy()
	p.DefaultWindowMs, p.IdempotencyTTLMs = 600_000, 600_000
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	rows, err := RunKafka(ctx, s, KafkaOptions{Brokers: brokers, Partitions: 2, Replication: 1, TxnRecords: []int{1000},
		BatchInterval: 100 * time.Millisecond, Policy: p, Timeout: 2 * time.Minute, SegmentBytes: 1 << 30})
	if err != nil {
		t.Fatal(err) // RunKafka also fails when the outcomes differ from the stream's
	}
	if len(rows) != 2 || !rows[1].Decides() {
		t.Fatalf("rows %+v", rows)
	}
	t.Run("the stage accepts exactly the distinct notifications", func(t *testing.T) {
		if err := CheckAccepted(s, rows); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("the stage tombstones the keys that expired on the seen-set topic, and the row says how many", func(t *testing.T) {
		// Of 3000 requests, 2100 originals write two keys and 450 second
		// calls one; all but the last ten minutes' expire, and with them
		// their buckets' records (herald.seen/v3): a tombstone a record.
		if tombstones := noteNumber(t, rows[1].Note, " of them tombstones"); tombstones == 0 {
			t.Fatalf("%.2f tombstones a request: %s", tombstones, rows[1].Note)
		}
	})
}

func TestHeraldBackendFailsWhenTheBrokerIsUnreachable(t *testing.T) {
	s := generate(t, StreamOptions{Requests: 10, Seed: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := RunKafka(ctx, s, KafkaOptions{
		Brokers: []string{"127.0.0.1:1"}, Partitions: 1, Replication: 1, TxnRecords: []int{10},
		Timeout: 2 * time.Second, ClientOpts: []kgo.Opt{kgo.RetryTimeout(time.Second)},
		Logger: slog.New(slog.DiscardHandler),
	})
	if err == nil {
		t.Fatal("a run against a closed port succeeded")
	}
}
