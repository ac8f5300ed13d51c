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
