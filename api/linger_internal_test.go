package api

import (
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldhq/herald/topics"
)

// TestTheSingleRecordProducerLingersTheConfiguredTime: the producer of a
// send to one recipient lets concurrent sends share a produce request for
// Config.ProducerLinger (the default when unset, none when negative); the
// producer is made but never connected.
func TestTheSingleRecordProducerLingersTheConfiguredTime(t *testing.T) {
	for _, tc := range []struct {
		name   string
		linger time.Duration
		want   time.Duration
	}{
		{"an unset linger is the documented default, 2 ms", 0, DefaultProducerLinger},
		{"a set linger is used as it is", 7 * time.Millisecond, 7 * time.Millisecond},
		{"a negative linger is none", -1, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := New(Config{Brokers: []string{"127.0.0.1:1"}, Catalog: topics.New(topics.DefaultOptions()), Keys: DevKeys(),
				ProducerLinger: tc.linger})
			if err != nil {
				t.Fatal(err)
			}
			cl, err := s.newPlainProducer()
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			if got := cl.OptValue(kgo.ProducerLinger).(time.Duration); got != tc.want {
				t.Fatalf("linger %v, want %v", got, tc.want)
			}
		})
	}
	t.Run("a linger longer than a minute is refused naming ProducerLinger", func(t *testing.T) {
		_, err := New(Config{Brokers: []string{"127.0.0.1:1"}, Catalog: topics.New(topics.DefaultOptions()), Keys: DevKeys(),
			ProducerLinger: time.Minute + time.Millisecond})
		if err == nil || !strings.Contains(err.Error(), "ProducerLinger 1m0.001s is longer than a minute") {
			t.Fatalf("error %v, want one naming ProducerLinger", err)
		}
	})
}
