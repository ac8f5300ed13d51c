package stage

import (
	"encoding/json"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// DeadLetter is the value of the record a stage writes to its
// DeadLetterTopic in place of the outputs of an input record that can
// never be written. It names the input record by its position, never
// carries its payload (which may be what was too large), and is keyed by
// the input's key.
type DeadLetter struct {
	Stage     string    `json:"stage"`
	Reason    string    `json:"reason"`
	Topic     string    `json:"topic"`
	Partition int32     `json:"partition"`
	Offset    int64     `json:"offset"`
	Timestamp time.Time `json:"timestamp"`
	// KeyBytes is the input key's length; the key itself is the dead
	// letter's key unless longer than maxDeadLetterKey.
	KeyBytes int `json:"keyBytes"`
}

// HeaderDeadLetter marks a stage's dead letter on the dead-letter topic
// (value: the stage's name), apart from other producers' dead letters.
const HeaderDeadLetter = "herald-dead-letter-stage"

const maxDeadLetterKey = 1024

func (r *Runner) deadLetter(in *kgo.Record, reason string) *kgo.Record {
	v, _ := json.Marshal(DeadLetter{ // cannot fail: no maps, no floats
		Stage: r.cfg.Name, Reason: reason, Topic: in.Topic, Partition: in.Partition, Offset: in.Offset,
		Timestamp: in.Timestamp, KeyBytes: len(in.Key),
	})
	key := in.Key
	if len(key) > maxDeadLetterKey {
		key = nil
	}
	return &kgo.Record{
		Topic: r.cfg.DeadLetterTopic, Key: key, Value: v,
		Headers: []kgo.RecordHeader{{Key: HeaderDeadLetter, Value: []byte(r.cfg.Name)}},
	}
}
