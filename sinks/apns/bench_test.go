package apns_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/heraldhq/herald/sinks"
	"github.com/heraldhq/herald/sinks/apns"
	"github.com/heraldhq/herald/sinks/apns/emulator"
)

// BenchmarkProviderAgainstTheEmulator is the adapter alone (no Kafka): b.N
// pushes to the emulator answering in 20 ms, with 256 or 1000 in flight.
// It bounds what one sink instance can reach on the same machine.
func BenchmarkProviderAgainstTheEmulator(b *testing.B) {
	for _, inFlight := range []int{256, 1000} {
		b.Run(fmt.Sprintf("%d in flight", inFlight), func(b *testing.B) {
			em, err := emulator.Start(emulator.Options{Latency: 20 * time.Millisecond, MaxRecords: 1})
			if err != nil {
				b.Fatal(err)
			}
			defer em.Close()
			p, err := apns.New(apns.Config{Host: em.URL(), RootCAs: em.RootCAs(), Topic: "com.example.app"})
			if err != nil {
				b.Fatal(err)
			}
			defer p.CloseIdleConnections()
			p.Send(context.Background(), command("warm-up"))
			sem := make(chan struct{}, inFlight)
			var wg sync.WaitGroup
			cmd := command("tok")
			b.ResetTimer()
			start := time.Now()
			for range b.N {
				sem <- struct{}{}
				wg.Add(1)
				go func() {
					defer func() { <-sem; wg.Done() }()
					if res := p.Send(context.Background(), cmd); res.Class != sinks.Success {
						b.Errorf("push: %v %v", res.Class, res.Err)
					}
				}()
			}
			wg.Wait()
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "pushes/s")
		})
	}
}
