package ops

import (
	"context"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// KafkaProbe is a readiness condition: a Kafka broker answers a metadata
// request. A role whose brokers are down waits (its clients retry) and is
// not ready meanwhile. The answer is reused for a second, so /readyz
// polled often costs at most one request a second.
type KafkaProbe struct {
	// Client returns the client to ask through, nil when there is none
	// (not started, or between sessions: not ready).
	Client func() *kgo.Client

	mu sync.Mutex
	at time.Time
	ok bool
}

// Ready pings a broker through Client, with a 2 s timeout.
func (p *KafkaProbe) Ready() bool {
	cl := p.Client()
	if cl == nil {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if time.Since(p.at) < time.Second {
		return p.ok
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	p.ok = cl.Ping(ctx) == nil
	p.at = time.Now()
	return p.ok
}
