package topics_test

import (
	"fmt"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldhq/herald/schemas"
	"github.com/heraldhq/herald/topics"
)

func TestPartitionerCoPartitionsKeysOfOneRecipient(t *testing.T) {
	cat := topics.New(topics.Options{Partitions: 12})
	p := cat.Partitioner()
	part := func(topic, key string) int {
		return p.ForTopic(topic).Partition(&kgo.Record{Topic: topic, Key: []byte(key)}, 12)
	}
	for i := 0; i < 200; i++ {
		recipient := fmt.Sprintf("u_%d", i)
		want := part(cat.Name(topics.Accepted), schemas.RecipientKey("acme", recipient))
		t.Run(fmt.Sprintf("devices and preferences of %s share the partition of its notifications", recipient), func(t *testing.T) {
			if got := part(cat.Name(topics.Devices), schemas.DeviceKey("acme", recipient, fmt.Sprintf("dev-%d", i*7))); got != want {
				t.Fatalf("device partition %d, accepted partition %d", got, want)
			}
			if got := part(cat.Name(topics.Preferences), schemas.RecipientKey("acme", recipient)); got != want {
				t.Fatalf("preferences partition %d, accepted partition %d", got, want)
			}
			if got := int(topics.PartitionOf(schemas.RecipientKey("acme", recipient), 12)); got != want {
				t.Fatalf("PartitionOf = %d, want %d", got, want)
			}
		})
	}
}

func TestPartitionerWritesChangelogRecordsToTheirGivenPartition(t *testing.T) {
	cat := topics.New(topics.Options{Partitions: 12})
	tp := cat.Partitioner().ForTopic(cat.Name(topics.Seen))
	for want := int32(0); want < 12; want++ {
		r := &kgo.Record{Topic: cat.Name(topics.Seen), Key: []byte("dedupe/x"), Partition: want}
		if got := tp.Partition(r, 12); got != int(want) {
			t.Fatalf("seen record for partition %d went to %d", want, got)
		}
	}
}
