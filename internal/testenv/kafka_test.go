package testenv_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldhq/herald/internal/testenv"
)

// TestKafkaTransactions proves on the real broker what herald's exactly-once
// stages rely on: records of an aborted transaction never reach a
// read_committed reader, though they are in the log.
func TestKafkaTransactions(t *testing.T) {
	brokers := testenv.Kafka(t)
	topic := testenv.Topic(t, brokers, 1, nil)

	producer := testenv.Client(t, brokers,
		kgo.TransactionalID(fmt.Sprintf("testenv-%s", topic)),
		kgo.TransactionTimeout(10*time.Second),
		kgo.DefaultProduceTopic(topic),
	)
	ctx := t.Context()
	transact(ctx, t, producer, kgo.TryCommit, "committed-0", "committed-1", "committed-2")
	transact(ctx, t, producer, kgo.TryAbort, "aborted-0", "aborted-1", "aborted-2")
	// The last record of the log: readers stop once they have seen it.
	transact(ctx, t, producer, kgo.TryCommit, "end")

	tests := []struct {
		name      string
		isolation kgo.IsolationLevel
		want      []string
	}{
		{
			name:      "read_committed sees only committed records",
			isolation: kgo.ReadCommitted(),
			want:      []string{"committed-0", "committed-1", "committed-2", "end"},
		},
		{
			name:      "read_uncommitted sees committed and aborted records",
			isolation: kgo.ReadUncommitted(),
			want: []string{
				"committed-0", "committed-1", "committed-2",
				"aborted-0", "aborted-1", "aborted-2",
				"end",
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			consumer := testenv.Client(t, brokers,
				kgo.ConsumeTopics(topic),
				kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
				kgo.FetchIsolationLevel(tt.isolation),
			)
			got := consumeUntil(t, consumer, "end")
			if !slices.Equal(got, tt.want) {
				t.Errorf("read %q, want %q", got, tt.want)
			}
		})
	}
}

// TestKafkaFencing proves the zombie fencing exactly-once relies on: a newer
// producer with the same transactional id aborts the older producer's open
// transaction, and the older producer can no longer commit.
func TestKafkaFencing(t *testing.T) {
	brokers := testenv.Kafka(t)
	topic := testenv.Topic(t, brokers, 1, nil)
	ctx := t.Context()
	newProducer := func() *kgo.Client {
		return testenv.Client(t, brokers,
			kgo.TransactionalID("testenv-"+topic),
			kgo.TransactionTimeout(10*time.Second),
			kgo.DefaultProduceTopic(topic),
		)
	}

	zombie := newProducer()
	if err := zombie.BeginTransaction(); err != nil {
		t.Fatalf("zombie: begin transaction: %v", err)
	}
	if err := zombie.ProduceSync(ctx, &kgo.Record{Value: []byte("zombie")}).FirstErr(); err != nil {
		t.Fatalf("zombie: produce: %v", err)
	}

	successor := newProducer()
	transact(ctx, t, successor, kgo.TryCommit, "successor", "end")

	t.Run("the fenced producer cannot commit", func(t *testing.T) {
		err := zombie.EndTransaction(ctx, kgo.TryCommit)
		if err == nil {
			t.Fatal("zombie committed after a newer producer with its transactional id started")
		}
		t.Logf("zombie's commit failed: %v", err)
	})
	t.Run("read_committed sees only the successor's records", func(t *testing.T) {
		consumer := testenv.Client(t, brokers,
			kgo.ConsumeTopics(topic),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
			kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		)
		want := []string{"successor", "end"}
		if got := consumeUntil(t, consumer, "end"); !slices.Equal(got, want) {
			t.Errorf("read %q, want %q", got, want)
		}
	})
}

// transact produces values in one transaction and ends it with commit.
func transact(ctx context.Context, t *testing.T, cl *kgo.Client, commit kgo.TransactionEndTry, values ...string) {
	t.Helper()
	if err := cl.BeginTransaction(); err != nil {
		t.Fatalf("begin transaction: %v", err)
	}
	recs := make([]*kgo.Record, len(values))
	for i, v := range values {
		recs[i] = &kgo.Record{Value: []byte(v)}
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatalf("produce %q: %v", values, err)
	}
	if err := cl.EndTransaction(ctx, commit); err != nil {
		t.Fatalf("end transaction (commit=%v): %v", commit, err)
	}
}

// consumeUntil polls until a record with value last arrives and returns the
// values read, in order. The deadline only guards against a hung broker.
func consumeUntil(t *testing.T, cl *kgo.Client, last string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	var got []string
	for {
		fetches := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("no %q record after reading %q: %v", last, got, err)
		}
		fetches.EachError(func(topic string, p int32, err error) {
			t.Fatalf("fetch %s[%d]: %v", topic, p, err)
		})
		done := false
		fetches.EachRecord(func(r *kgo.Record) {
			got = append(got, string(r.Value))
			done = done || string(r.Value) == last
		})
		if done {
			return got
		}
	}
}

// TestReadCommitted checks the helper most Kafka tests read their outputs
// with: a transaction open at the call and committed within its settle wait
// is read whole on every partition (as is one whose EndTransaction returned
// before its markers were written), and a transaction left open is not read
// and holds the call up for no more than the settle wait.
func TestReadCommitted(t *testing.T) {
	brokers := testenv.Kafka(t)
	ctx := t.Context()
	t.Run("a transaction committing during the call is read on every partition", func(t *testing.T) {
		// The window between EndTransaction's return and the last marker
		// is milliseconds and rarely hit on purpose; a transaction that
		// commits while the call waits is the same case, made certain.
		topic := testenv.Topic(t, brokers, 12, nil)
		producer := testenv.Client(t, brokers,
			kgo.TransactionalID("testenv-"+topic),
			kgo.TransactionTimeout(time.Minute),
			kgo.DefaultProduceTopic(topic),
			kgo.RecordPartitioner(kgo.RoundRobinPartitioner()),
		)
		transact(ctx, t, producer, kgo.TryCommit, "committed")
		if err := producer.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		var open []*kgo.Record
		for i := range 24 {
			open = append(open, &kgo.Record{Value: []byte(fmt.Sprint("committing-", i))})
		}
		if err := producer.ProduceSync(ctx, open...).FirstErr(); err != nil {
			t.Fatal(err)
		}
		commit := make(chan error, 1)
		go func() {
			time.Sleep(time.Second)
			commit <- producer.EndTransaction(ctx, kgo.TryCommit)
		}()
		got := testenv.ReadCommitted(t, brokers, topic)
		if err := <-commit; err != nil {
			t.Fatal(err)
		}
		if len(got) != 25 {
			t.Fatalf("read %d records, want 25: the one committed before and the 24 committed during the call", len(got))
		}
	})
	t.Run("an open transaction is not read", func(t *testing.T) {
		if testing.Short() {
			t.Skip("waits out the settle wait")
		}
		topic := testenv.Topic(t, brokers, 1, nil)
		producer := testenv.Client(t, brokers,
			kgo.TransactionalID("testenv-"+topic),
			kgo.TransactionTimeout(time.Minute),
			kgo.DefaultProduceTopic(topic),
		)
		transact(ctx, t, producer, kgo.TryCommit, "committed")
		if err := producer.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		if err := producer.ProduceSync(ctx, &kgo.Record{Value: []byte("open")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, r := range testenv.ReadCommitted(t, brokers, topic) {
			got = append(got, string(r.Value))
		}
		if want := []string{"committed"}; !slices.Equal(got, want) {
			t.Fatalf("read %q, want %q", got, want)
		}
	})
}
