package stage

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

func TestProduceErrorsThatNoRetryCanFixAreToldApart(t *testing.T) {
	cases := []struct {
		name  string
		err   error
		never bool
	}{
		{"a record over the topic's max.message.bytes can never be written", kerr.MessageTooLarge, true},
		{"a batch over the broker's limit can never be written", kerr.RecordListTooLarge, true},
		{"an invalid record can never be written", kerr.InvalidRecord, true},
		{"a corrupt message is retried, as Kafka calls it retriable (a CRC failure in transit)", kerr.CorruptMessage, false},
		{"a timestamp out of the topic's bounds can never be written", kerr.InvalidTimestamp, true},
		{"a wrapped cause is still recognised", fmt.Errorf("produce to t: %w", kerr.MessageTooLarge), true},
		{"a leader change is retried", kerr.NotLeaderForPartition, false},
		{"a timeout is retried", kerr.RequestTimedOut, false},
		{"a missing topic is retried", kerr.UnknownTopicOrPartition, false},
		{"a cancelled context is retried", context.Canceled, false},
		{"an unknown error is retried", errors.New("connection reset"), false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := neverWritable(tc.err); got != tc.never {
				t.Fatalf("neverWritable(%v) = %v, want %v", tc.err, got, tc.never)
			}
		})
	}
}

func TestADeadLetterNamesItsInputWithoutItsPayload(t *testing.T) {
	r := &Runner{cfg: Config{Name: "dedupe", DeadLetterTopic: "herald.deadletters"}}
	cases := []struct {
		name    string
		key     []byte
		wantKey []byte
	}{
		{"a short key is kept", []byte("n1"), []byte("n1")},
		{"a key of the longest length kept is kept", make([]byte, maxDeadLetterKey), make([]byte, maxDeadLetterKey)},
		{"a key too long to be a safe key is dropped", make([]byte, maxDeadLetterKey+1), nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			in := &kgo.Record{Topic: "herald.requests", Partition: 3, Offset: 42, Key: tc.key, Value: []byte("payload-secret")}
			dl := r.deadLetter(in, "MESSAGE_TOO_LARGE")
			if dl.Topic != "herald.deadletters" || string(dl.Key) != string(tc.wantKey) {
				t.Fatalf("dead letter to %s keyed %q, want herald.deadletters keyed %q", dl.Topic, dl.Key, tc.wantKey)
			}
			want := `"stage":"dedupe","reason":"MESSAGE_TOO_LARGE","topic":"herald.requests","partition":3,"offset":42`
			if v := string(dl.Value); !strings.Contains(v, want) || strings.Contains(v, "payload-secret") {
				t.Fatalf("dead letter %s: want it to contain %s and not the payload", v, want)
			}
			if len(dl.Headers) != 1 || dl.Headers[0].Key != HeaderDeadLetter || string(dl.Headers[0].Value) != "dedupe" {
				t.Fatalf("headers %v, want %s=dedupe", dl.Headers, HeaderDeadLetter)
			}
		})
	}
}

func TestRestoreRequestsRetryRetriableErrorsOnly(t *testing.T) {
	boom := errors.New("boom")
	cases := []struct {
		name      string
		errs      []error // what successive calls return
		wantCalls int
		wantErr   error
	}{
		{"a leader election is waited out", []error{kerr.LeaderNotAvailable, kerr.LeaderNotAvailable, nil}, 3, nil},
		{"pending offsets are waited out", []error{kerr.UnstableOffsetCommit, nil}, 2, nil},
		{"an authorization failure is returned at once", []error{kerr.TopicAuthorizationFailed}, 1, kerr.TopicAuthorizationFailed},
		{"an error that is not Kafka's is returned at once", []error{boom}, 1, boom},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			calls := 0
			err := retrying(context.Background(), func() error {
				calls++
				return tc.errs[calls-1]
			})
			if calls != tc.wantCalls {
				t.Fatalf("%d calls, want %d", calls, tc.wantCalls)
			}
			if !errors.Is(err, tc.wantErr) || (err == nil) != (tc.wantErr == nil) {
				t.Fatalf("error %v, want %v", err, tc.wantErr)
			}
		})
	}
	t.Run("a retriable error ends when the context does", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		calls := 0
		err := retrying(ctx, func() error {
			if calls++; calls == 3 {
				cancel()
			}
			return kerr.LeaderNotAvailable
		})
		if !errors.Is(err, context.Canceled) || !errors.Is(err, kerr.LeaderNotAvailable) {
			t.Fatalf("error %v, want the cancellation and the last error", err)
		}
	})
}

func TestOnlyRefusalsAndTheBrokersDenialsStopAStage(t *testing.T) {
	cases := []struct {
		name  string
		err   error
		fatal bool
	}{
		{"a refusal to start stops it", fatal(errors.New("changelog not co-partitioned")), true},
		{"a refusal wrapped by a restore stops it", fmt.Errorf("restore partition 0: %w", fatal(errors.New("offsets lost"))), true},
		{"a denied transactional id stops it", fmt.Errorf("end transaction: %w", kerr.TransactionalIDAuthorizationFailed), true},
		{"a denied group stops it", kerr.GroupAuthorizationFailed, true},
		{"a denied topic stops it", kerr.TopicAuthorizationFailed, true},
		{"a denied cluster stops it", kerr.ClusterAuthorizationFailed, true},
		{"failed SASL authentication stops it", kerr.SaslAuthenticationFailed, true},
		{"a static member fenced by another with its instance id stops it", kerr.FencedInstanceID, true},
		{"a transaction timeout the broker refuses stops it", kerr.InvalidTransactionTimeout, true},
		{"a refused connection restarts the session", errors.New("unable to dial: dial tcp 127.0.0.1:9092: connect: connection refused"), false},
		{"a flush that timed out restarts the session", fmt.Errorf("stage x: flush: %w", context.DeadlineExceeded), false},
		{"a producer fenced after its transaction timed out restarts the session", kerr.ProducerFenced, false},
		{"a coordinator move restarts the session", kerr.NotCoordinator, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := isFatal(tc.err); got != tc.fatal {
				t.Fatalf("isFatal(%v) = %v, want %v", tc.err, got, tc.fatal)
			}
			// Denied is the broker's part: every fatal case but a refusal.
			var refusal *fatalError
			if got, want := Denied(tc.err), tc.fatal && !errors.As(tc.err, &refusal); got != want {
				t.Fatalf("Denied(%v) = %v, want %v", tc.err, got, want)
			}
		})
	}
}
