package api

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/heraldhq/herald/internal/metrics"
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

// TestSingleRecordWritesWithinTheLingerShareAProduceRequest: the linger
// takes effect. franz-go's ProduceSync drains its partitions at once, so
// writes made with it never lingered: every send cost a produce request
// of its own whatever ProducerLinger said. Here a second write, made while
// the first is buffered and lingering, goes out in the same request.
func TestSingleRecordWritesWithinTheLingerShareAProduceRequest(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "requests"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var mu sync.Mutex
	requests, records := 0, 0
	c.ControlKey(int16(kmsg.Produce), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		mu.Lock()
		defer mu.Unlock()
		requests++
		for _, tp := range kreq.(*kmsg.ProduceRequest).Topics {
			for _, p := range tp.Partitions {
				records += batchRecords(p.Records)
			}
		}
		return nil, nil, false
	})
	// Long enough that the second write is made well within it; the test
	// takes twice as long.
	const linger = time.Second
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ProducerLinger(linger), kgo.RequiredAcks(kgo.AllISRAcks()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	w := newWriter(nil, 1, 10*time.Second, slog.New(slog.NewTextHandler(io.Discard, nil)), metrics.NewRegistry())
	w.newPlain = func() (*kgo.Client, error) { return cl, nil }

	errs := make(chan error, 2)
	write := func(v string) {
		errs <- w.write(context.Background(), []*kgo.Record{{Topic: "requests", Value: []byte(v)}})
	}
	// A first write while the client knows no partition of the topic
	// lingers anyway (ProduceSync could not drain what it had not yet
	// placed): the writes measured are those of a client that does, as
	// an API's after its first send.
	write("warm-up")
	if err := <-errs; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	requests, records = 0, 0
	mu.Unlock()
	go write("first")
	for cl.BufferedProduceRecords() == 0 && len(errs) == 0 { // (written already: it did not linger)
		time.Sleep(time.Millisecond)
	}
	go write("second")
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if requests != 1 || records != 2 {
		t.Fatalf("%d produce requests carried %d records; want the two writes in one request", requests, records)
	}
}
