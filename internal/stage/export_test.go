package stage

import "testing"

// SetProduceChunk makes transactions hand their outputs to the producer
// every n outputs for the rest of t.
func SetProduceChunk(t testing.TB, n int) {
	old := produceChunk
	produceChunk = n
	t.Cleanup(func() { produceChunk = old })
}
