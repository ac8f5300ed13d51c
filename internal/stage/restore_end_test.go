package stage_test

import (
	"strconv"
	"sync"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldhq/herald/internal/stage"
	"github.com/heraldhq/herald/internal/testenv"
)

// firstGate is a restoreLog whose first Restore waits until released (and
// says when it is reached), so a test can write while a restore runs.
type firstGate struct {
	restoreLog
	once             sync.Once
	reached, release chan struct{}
}

func (g *firstGate) Restore(r *kgo.Record) error {
	g.once.Do(func() { close(g.reached); <-g.release })
	return g.restoreLog.Restore(r)
}

func TestARestoreReadsEveryChangelogToItsEndThoughAnotherGrowsMeanwhile(t *testing.T) {
	onClusters(t, func(t *testing.T, brokers []string, opts []kgo.Opt) {
		ctx := testenv.Guarded(t)
		adm := kadm.NewClient(testenv.Client(t, brokers, opts...))
		a, b := sanitize("re-a-"+t.Name())+"-a", sanitize("re-b-"+t.Name())+"-b"
		for _, name := range []string{a, b} {
			if _, err := adm.CreateTopic(ctx, 1, 1, nil, name); err != nil {
				t.Fatal(err)
			}
		}
		w := testenv.Client(t, brokers, opts...)
		put := func(topic string, keys ...string) {
			t.Helper()
			for _, k := range keys { // one batch each
				if err := w.ProduceSync(ctx, &kgo.Record{Topic: topic, Key: []byte(k), Value: []byte("v")}).FirstErr(); err != nil {
					t.Fatal(err)
				}
			}
		}
		put(a, "a0")
		for i := range 20 {
			put(b, "b"+strconv.Itoa(i))
		}
		g := &firstGate{reached: make(chan struct{}), release: make(chan struct{})}
		done := make(chan error, 1)
		var n int64
		go func() {
			var err error
			// One batch per fetch: b takes twenty fetches, among which
			// the restore reads a's records past its end.
			n, err = stage.RestorePartition(ctx, testenv.Client(t, brokers, opts...), []string{a, b}, 0, g,
				append(append([]kgo.Opt(nil), opts...), kgo.FetchMaxPartitionBytes(1), kgo.FetchMaxBytes(1))...)
			done <- err
		}()
		<-g.reached
		put(a, "a1", "a2") // past a's end: read by the restore's fetches, never restored
		close(g.release)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if n != 21 || len(g.got) != 21 {
			t.Fatalf("restored %d records %v, want a's one and b's twenty (a's later records left out)", n, g.got)
		}
	})
}
