package testenv

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldhq/herald/topics"
)

// EnvKafkaBrokers names the environment variable holding the test broker's
// addresses, comma separated (scripts/kafka/kafka listens on 127.0.0.1:39092).
const EnvKafkaBrokers = "HERALD_TEST_KAFKA_BROKERS"

const kafkaStartHint = "start the test broker with `scripts/kafka/kafka start` and run with " +
	EnvKafkaBrokers + "=127.0.0.1:39092"

// kafkaCheck reads EnvKafkaBrokers and checks the broker answers, once per
// test process.
var kafkaCheck = sync.OnceValues(func() ([]string, error) {
	brokers := envList(EnvKafkaBrokers)
	if len(brokers) == 0 {
		return nil, fmt.Errorf("testenv: %s is not set; %s", EnvKafkaBrokers, kafkaStartHint)
	}
	if err := pingKafka(brokers); err != nil {
		return nil, fmt.Errorf("testenv: Kafka broker %s is not reachable (%w); %s",
			strings.Join(brokers, ","), err, kafkaStartHint)
	}
	return brokers, nil
})

// Kafka returns the seed brokers of the real Kafka broker the full suite runs
// against. It skips t under -short, and fails t when EnvKafkaBrokers is unset
// or the broker does not answer a metadata request.
func Kafka(t testing.TB) []string {
	t.Helper()
	skipShort(t, "a Kafka broker")
	brokers, err := kafkaCheck()
	if err != nil {
		t.Fatal(err)
	}
	return slices.Clone(brokers)
}

// pingKafka issues one metadata request with a short timeout.
func pingKafka(brokers []string) error {
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(brokers...),
		kgo.DialTimeout(3*time.Second),
		kgo.RetryTimeout(5*time.Second),
	)
	if err != nil {
		return fmt.Errorf("new client: %w", err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m, err := kadm.NewClient(cl).BrokerMetadata(ctx)
	if err != nil {
		return fmt.Errorf("metadata: %w", err)
	}
	if len(m.Brokers) == 0 {
		return errors.New("metadata lists no brokers")
	}
	return nil
}

// Client returns a franz-go client for brokers with opts applied, closed when
// t's cleanup runs.
func Client(t testing.TB, brokers []string, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	all := append([]kgo.Opt{kgo.SeedBrokers(brokers...)}, opts...)
	cl, err := kgo.NewClient(all...)
	if err != nil {
		t.Fatalf("testenv: new Kafka client: %v", err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// topicSetupTimeout bounds creating a topic and waiting for its metadata, and
// deleting it; it guards against a hung broker, it does not assert speed.
const topicSetupTimeout = 30 * time.Second

// Topic creates a topic with a unique name derived from t.Name(), the given
// partitions (-1 for the broker default, 1), replication factor 1 and configs
// (nil for broker defaults),
// waits until every partition has a leader, and deletes the topic in t's
// cleanup. It returns the topic's name.
//
// To observe compaction, pass "cleanup.policy": "compact", a small
// "segment.ms" (e.g. "100") and "min.cleanable.dirty.ratio" (e.g. "0.01"):
// only closed segments are compacted, and the broker's cleaner looks every
// second.
func Topic(t testing.TB, brokers []string, partitions int32, configs map[string]*string) string {
	t.Helper()
	name := uniqueName(t, "test-", 160)
	adm := kadm.NewClient(Client(t, brokers))

	ctx, cancel := context.WithTimeout(context.Background(), topicSetupTimeout)
	defer cancel()
	resp, err := adm.CreateTopic(ctx, partitions, 1, configs, name)
	if err != nil {
		t.Fatalf("testenv: create topic %s: %v", name, err)
	}
	// Registered after Client's cleanup, so it runs first, with the client open.
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), topicSetupTimeout)
		defer cancel()
		if _, err := adm.DeleteTopic(ctx, name); err != nil && !errors.Is(err, kerr.UnknownTopicOrPartition) {
			t.Errorf("testenv: delete topic %s: %v", name, err)
		}
	})
	if err := topics.AwaitReady(ctx, adm, resp.NumPartitions, name); err != nil {
		t.Fatalf("testenv: topic %s: %v", name, err)
	}
	return name
}
