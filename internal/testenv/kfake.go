package testenv

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"
)

// Kfake starts an in-process kfake cluster of one broker for a fast test
// (opts add to it), closed when the test ends. kfake's known defects are
// in DESIGN.md: the exactly-once and crash claims are proven on the real
// broker (Kafka), never on it alone.
func Kfake(t testing.TB, opts ...kfake.Opt) *kfake.Cluster {
	t.Helper()
	c, err := kfake.NewCluster(append([]kfake.Opt{kfake.NumBrokers(1)}, opts...)...)
	if err != nil {
		t.Fatalf("kfake: %v", err)
	}
	t.Cleanup(c.Close)
	return c
}
