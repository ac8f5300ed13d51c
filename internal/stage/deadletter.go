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
	// Timer marks the dead letter of a timer's output (a task's Tick),
	// written in place of that output: Topic names the topic it could not
	// be written to, Partition and Offset are -1, Timestamp and KeyBytes
	// are the output's, and its key is the output's key.
	Timer bool `json:"timer,omitempty"`
}

// outputKey names a timer's output across retries of its transaction:
// a task emits the same timer output again after an abort, with the same
// topic and key (its value may differ, e.g. a time in it).
type outputKey struct{ topic, key string }

// replaceUnwritable puts a dead letter in place of each timer output (from
// index ticksFrom on) known to be unwritable, and returns how many.
// Called with r.mu held.
func (r *Runner) replaceUnwritable(out *Out, ticksFrom int) int {
	if len(r.unwritable) == 0 {
		return 0
	}
	n := 0
	for i := ticksFrom; i < len(out.records); i++ {
		rec := out.records[i]
		if reason, ok := r.unwritable[outputKey{rec.Topic, string(rec.Key)}]; ok {
			out.records[i] = r.deadLetterOf(DeadLetter{Reason: reason, Topic: rec.Topic, Partition: -1, Offset: -1,
				Timestamp: rec.Timestamp, KeyBytes: len(rec.Key), Timer: true}, rec.Key)
			n++
		}
	}
	return n
}

// HeaderDeadLetter marks a stage's dead letter on the dead-letter topic
// (value: the stage's name), apart from other producers' dead letters.
const HeaderDeadLetter = "herald-dead-letter-stage"

const maxDeadLetterKey = 1024

func (r *Runner) deadLetter(in *kgo.Record, reason string) *kgo.Record {
	return r.deadLetterOf(DeadLetter{Reason: reason, Topic: in.Topic, Partition: in.Partition, Offset: in.Offset,
		Timestamp: in.Timestamp, KeyBytes: len(in.Key)}, in.Key)
}

// deadLetterOf is the record of d, keyed by key.
func (r *Runner) deadLetterOf(d DeadLetter, key []byte) *kgo.Record {
	d.Stage = r.cfg.Name
	v, _ := json.Marshal(d) // cannot fail: no maps, no floats
	if len(key) > maxDeadLetterKey {
		key = nil
	}
	return &kgo.Record{
		Topic: r.cfg.DeadLetterTopic, Key: key, Value: v,
		Headers: []kgo.RecordHeader{{Key: HeaderDeadLetter, Value: []byte(r.cfg.Name)}},
	}
}
