package topics

import (
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldhq/herald/schemas"
)

// Partitioner returns the partitioner every herald producer uses, so a key
// lands where the stage that owns it reads:
//   - changelog topics (the seen-set, the route state, the sinks' state, the webhook completion state) are written to the partition set on the
//     record (the partition of the input record that produced the change);
//     so are replies (the partition the waiting caller named, internal/reply);
//   - devices are hashed by their recipient prefix, co-partitioning them
//     with preferences and accepted notifications;
//   - everything else is hashed by its whole key with Kafka's murmur2, the
//     default of the Java client, so producers in other languages agree.
func (c *Catalog) Partitioner() kgo.Partitioner {
	manual := map[string]bool{c.Name(Seen): true, c.Name(Route): true, c.Name(CompletionState): true, c.Name(FallbackState): true, c.Name(Replies): true}
	for _, ch := range SinkChannels {
		manual[c.Name(SinkState(ch))] = true
	}
	return &partitioner{
		manual:  manual,
		devices: c.Name(Devices),
		hash:    kgo.StickyKeyPartitioner(nil),
	}
}

type partitioner struct {
	manual  map[string]bool
	devices string
	hash    kgo.Partitioner
}

func (p *partitioner) ForTopic(topic string) kgo.TopicPartitioner {
	switch {
	case p.manual[topic]:
		return kgo.ManualPartitioner().ForTopic(topic)
	case topic == p.devices:
		return prefixPartitioner{p.hash.ForTopic(topic)}
	default:
		return p.hash.ForTopic(topic)
	}
}

// prefixPartitioner hashes a device key by its RecipientKey prefix.
type prefixPartitioner struct{ kgo.TopicPartitioner }

func (pp prefixPartitioner) Partition(r *kgo.Record, n int) int {
	key := r.Key
	r.Key = []byte(schemas.RecipientPrefix(string(key)))
	defer func() { r.Key = key }()
	return pp.TopicPartitioner.Partition(r, n)
}

// PartitionOf returns the partition a key of a hashed topic lands in among n
// partitions: what Partitioner does for a record with that key. Producers
// in other languages can check their partitioner against it.
func PartitionOf(key string, n int) int32 {
	tp := kgo.StickyKeyPartitioner(nil).ForTopic("")
	return int32(tp.Partition(&kgo.Record{Key: []byte(key)}, n))
}
