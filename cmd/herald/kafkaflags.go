package main

import (
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldhq/herald/topics"
)

// kafkaFlags are the flags every command that talks to Kafka shares.
type kafkaFlags struct {
	brokers     string
	prefix      string
	partitions  int
	replication int
	// feedRetention is herald.feed's retention (topics.Options.FeedRetentionMs).
	feedRetention time.Duration
}

func (k *kafkaFlags) register(fs *flag.FlagSet) {
	d := topics.DefaultOptions()
	fs.StringVar(&k.brokers, "brokers", "127.0.0.1:9092", "Kafka bootstrap brokers, comma separated")
	fs.StringVar(&k.prefix, "topic-prefix", d.Prefix, "prefix of every herald topic name")
	fs.IntVar(&k.partitions, "partitions", int(d.Partitions), "partitions of every herald topic (co-partitioned: keep equal, never change on a live cluster)")
	fs.IntVar(&k.replication, "replication", int(d.Replication), "replication factor of every herald topic")
	fs.DurationVar(&k.feedRetention, "feed-retention", time.Duration(d.FeedRetentionMs)*time.Millisecond,
		"how long in-app feed items are kept (herald.feed's retention.ms; the API serves none older)")
}

func (k *kafkaFlags) catalog() *topics.Catalog {
	return topics.New(topics.Options{Prefix: k.prefix, Partitions: int32(k.partitions), Replication: int16(k.replication),
		FeedRetentionMs: k.feedRetention.Milliseconds()})
}

func (k *kafkaFlags) seeds() ([]string, error) {
	var out []string
	for _, b := range strings.Split(k.brokers, ",") {
		if b = strings.TrimSpace(b); b != "" {
			out = append(out, b)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: --brokers (HERALD_BROKERS) is empty", errUsage)
	}
	if k.partitions < 1 {
		return nil, fmt.Errorf("%w: --partitions must be at least 1, got %d", errUsage, k.partitions)
	}
	if k.replication < 1 {
		return nil, fmt.Errorf("%w: --replication must be at least 1, got %d", errUsage, k.replication)
	}
	return out, nil
}

func (k *kafkaFlags) client(opts ...kgo.Opt) (*kgo.Client, error) {
	seeds, err := k.seeds()
	if err != nil {
		return nil, err
	}
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(seeds...)}, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("kafka client: %w", err)
	}
	return cl, nil
}
