package stage

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// SetProduceChunk makes transactions hand their outputs to the producer
// every n outputs for the rest of t.
func SetProduceChunk(t testing.TB, n int) {
	old := produceChunk
	produceChunk = n
	t.Cleanup(func() { produceChunk = old })
}

// ProducerLingerOf is the linger of the producer that r's sessions are
// built with: a client made from r's options, never connected.
func ProducerLingerOf(t testing.TB, r *Runner) time.Duration {
	t.Helper()
	cl, err := kgo.NewClient(r.opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	return cl.OptValue(kgo.ProducerLinger).(time.Duration)
}
