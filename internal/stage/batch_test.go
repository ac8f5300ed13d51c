package stage_test

import (
	"crypto/rand"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldhq/herald/internal/backoff"
	"github.com/heraldhq/herald/internal/stage"
	"github.com/heraldhq/herald/internal/testenv"
)

// batchLog is a counter that records how many input records each committed
// transaction held, and counts the transactions it was ticked in.
type batchLog struct {
	*counter
	mu        *sync.Mutex
	inTxn     int
	committed *[]int
	ticks     *int
}

func (b *batchLog) Process(r *kgo.Record, out *stage.Out) error {
	b.inTxn++
	return b.counter.Process(r, out)
}

func (b *batchLog) Tick(out *stage.Out) {
	b.mu.Lock()
	*b.ticks++
	b.mu.Unlock()
	b.counter.Tick(out)
}

func (b *batchLog) Commit() {
	b.mu.Lock()
	*b.committed = append(*b.committed, b.inTxn)
	b.mu.Unlock()
	b.inTxn = 0
	b.counter.Commit()
}

func (b *batchLog) Abort() { b.inTxn = 0; b.counter.Abort() }

func TestATransactionHoldsAtMostMaxBatchRecordsInputsAndAnIdlePollCommitsNothing(t *testing.T) {
	onClusters(t, func(t *testing.T, brokers []string, opts []kgo.Opt) {
		r := newRig(t, brokers, opts, 1, nil)
		const n, limit = 30, 4
		keys := make([]string, n)
		for i := range keys {
			keys[i] = "k" + strconv.Itoa(i)
		}
		r.produce(0, keys...) // all buffered at the first poll
		var mu sync.Mutex
		var committed []int
		ticks := 0
		cfg := r.config()
		newCounter := cfg.NewTask
		cfg.NewTask = func(p int32) stage.Task {
			return &batchLog{counter: newCounter(p).(*counter), mu: &mu, committed: &committed, ticks: &ticks}
		}
		cfg.MaxBatchRecords, cfg.BatchInterval = limit, 10*time.Millisecond
		s := r.start(cfg)
		r.awaitOut(s, n)
		// Let the stage poll idly a while: wait for 20 more ticks.
		mu.Lock()
		until := ticks + 20
		mu.Unlock()
		for deadline := time.Now().Add(guard()); ; time.Sleep(10 * time.Millisecond) {
			mu.Lock()
			done := ticks >= until
			mu.Unlock()
			if done {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("the stage stopped ticking")
			}
		}
		mu.Lock()
		defer mu.Unlock()
		total := 0
		for _, c := range committed {
			if c > limit {
				t.Fatalf("a transaction committed %d input records, over MaxBatchRecords %d (transactions %v)", c, limit, committed)
			}
			if c == 0 {
				t.Fatalf("a transaction with no input and no output was committed (transactions %v)", committed)
			}
			total += c
		}
		if total != n {
			t.Fatalf("transactions %v hold %d records, want %d", committed, total, n)
		}
	})
}

// bigTick is a counter whose timer, in the first transactions that hold
// input, emits an output that can never be written (to its own topic: a
// broker fails a whole partition's produce batch for one bad record, so on
// the input's output topic the input's own output would fail too).
type bigTick struct {
	*counter
	timers    string
	processed bool
	left      *int // transactions still to poison
}

func (b *bigTick) Process(r *kgo.Record, out *stage.Out) error {
	b.processed = true
	return b.counter.Process(r, out)
}

func (b *bigTick) Tick(out *stage.Out) {
	if b.processed && *b.left > 0 {
		noise := make([]byte, 8192) // incompressible, over the topic's max.message.bytes
		rand.Read(noise)
		out.Emit(&kgo.Record{Topic: b.timers, Key: []byte("timer"), Value: noise})
	}
}

func (b *bigTick) Commit() { b.processed = false; b.counter.Commit() }
func (b *bigTick) Abort()  { b.processed = false; *b.left--; b.counter.Abort() }

func TestATimersOutputThatCanNeverBeWrittenIsRetriedAndDeadLettersNoInput(t *testing.T) {
	onClusters(t, func(t *testing.T, brokers []string, opts []kgo.Opt) {
		maxBytes := "2048"
		r := newRig(t, brokers, opts, 1, nil)
		timers := testenv.Topic(t, brokers, 1, map[string]*string{"max.message.bytes": &maxBytes})
		r.produce(0, "a")
		left := 2
		cfg := r.config()
		newCounter := cfg.NewTask
		cfg.NewTask = func(p int32) stage.Task {
			return &bigTick{counter: newCounter(p).(*counter), timers: timers, left: &left}
		}
		cfg.Backoff = backoff.Policy{Min: 10 * time.Millisecond, Max: 50 * time.Millisecond}
		s := r.start(cfg)
		if got := r.awaitOut(s, 1); !equal(got, []string{"a=1"}) {
			t.Fatalf("outputs %v, want a=1 once the timer's output is gone", got)
		}
		if err := s.stop(); err != nil {
			t.Fatal(err)
		}
		if dls := testenv.ReadCommitted(t, brokers, r.deadLetters, opts...); len(dls) != 0 {
			t.Fatalf("%d dead letters: an input is never blamed for a timer's output", len(dls))
		}
	})
}
