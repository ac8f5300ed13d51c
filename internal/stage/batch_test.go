package stage_test

import (
	"crypto/rand"
	"encoding/json"
	"strconv"
	"strings"
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
		for deadline := time.Now().Add(testenv.Guard()); ; time.Sleep(10 * time.Millisecond) {
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

// bigTick is a counter whose timer, in each transaction that holds input,
// emits an output that can never be written (over the topic's
// max.message.bytes), keyed "timer".
type bigTick struct {
	*counter
	timers    string
	processed bool
}

func (b *bigTick) Process(r *kgo.Record, out *stage.Out) error {
	b.processed = true
	return b.counter.Process(r, out)
}

func (b *bigTick) Tick(out *stage.Out) {
	if b.processed {
		noise := make([]byte, 8192) // incompressible, over the topic's max.message.bytes
		rand.Read(noise)
		out.Emit(&kgo.Record{Topic: b.timers, Key: []byte("timer"), Value: noise})
	}
}

func (b *bigTick) Commit() { b.processed = false; b.counter.Commit() }
func (b *bigTick) Abort()  { b.processed = false; b.counter.Abort() }

// TestATimersOutputThatCanNeverBeWrittenIsDeadLetteredInItsPlace: the
// timer's output is replaced by a dead letter naming it (not any input),
// and the input processed in the same transaction is committed. When the
// timer writes to the input's output topic, the broker fails the input's
// output too (one produce batch per partition): the input must still not
// be blamed.
func TestATimersOutputThatCanNeverBeWrittenIsDeadLetteredInItsPlace(t *testing.T) {
	for _, sameTopic := range []bool{false, true} {
		name := "on a topic of its own"
		if sameTopic {
			name = "on the topic and partition of the input's output"
		}
		t.Run(name, func(t *testing.T) {
			onClusters(t, func(t *testing.T, brokers []string, opts []kgo.Opt) {
				maxBytes := "2048"
				limited := map[string]*string{"max.message.bytes": &maxBytes}
				var r *rig
				timers := ""
				if sameTopic {
					r = newRig(t, brokers, opts, 1, limited)
					timers = r.out
				} else {
					r = newRig(t, brokers, opts, 1, nil)
					timers = testenv.Topic(t, brokers, 1, limited)
				}
				r.produce(0, "a")
				cfg := r.config()
				newCounter := cfg.NewTask
				cfg.NewTask = func(p int32) stage.Task {
					// reusing: the culprit's key in the dead letter must be
					// read before the aborted transaction's records are
					// reused.
					return &reusing{Task: &bigTick{counter: newCounter(p).(*counter), timers: timers}}
				}
				cfg.Backoff = backoff.Policy{Min: 10 * time.Millisecond, Max: 50 * time.Millisecond}
				s := r.start(cfg)
				if got := r.awaitOut(s, 1); !equal(got, []string{"a=1"}) {
					t.Fatalf("outputs %v, want a=1, the input's output, alone", got)
				}
				if err := s.stop(); err != nil {
					t.Fatal(err)
				}
				dls := testenv.ReadCommitted(t, brokers, r.deadLetters, opts...)
				if len(dls) != 1 {
					t.Fatalf("%d dead letters, want one, the timer output's", len(dls))
				}
				var d stage.DeadLetter
				if err := json.Unmarshal(dls[0].Value, &d); err != nil {
					t.Fatal(err)
				}
				if !d.Timer || d.Topic != timers || d.Partition != -1 || d.Offset != -1 || string(dls[0].Key) != "timer" || d.Reason == "" {
					t.Fatalf("dead letter %+v key %q, want the timer output's on %s, at no input position (partition and offset -1)", d, dls[0].Key, timers)
				}
			})
		})
	}
}

// idleTimer is a counter whose timer fires once, in the first transaction
// without input after one with input committed: it emits "due=fired" to
// the output topic and, beside it, an output that can never be written
// (over the timers topic's max.message.bytes), keyed "timer".
type idleTimer struct {
	*counter
	timers                   string
	armed, fired             bool // committed
	processed, firedThisTime bool // the open transaction's
}

func (i *idleTimer) Process(r *kgo.Record, out *stage.Out) error {
	i.processed = true
	return i.counter.Process(r, out)
}

func (i *idleTimer) Tick(out *stage.Out) {
	if i.processed || !i.armed || i.fired {
		return
	}
	i.firedThisTime = true
	noise := make([]byte, 8192) // incompressible, over the topic's max.message.bytes
	rand.Read(noise)
	out.Emit(&kgo.Record{Topic: i.out, Key: []byte("due"), Value: []byte("due=fired")})
	out.Emit(&kgo.Record{Topic: i.timers, Key: []byte("timer"), Value: noise})
}

func (i *idleTimer) Commit() {
	i.armed = i.armed || i.processed
	i.fired = i.fired || i.firedThisTime
	i.processed, i.firedThisTime = false, false
	i.counter.Commit()
}

func (i *idleTimer) Abort() {
	i.processed, i.firedThisTime = false, false
	i.counter.Abort()
}

// TestAnInputlessTransactionWithAnUnwritableTimerOutputIsAbortedNotCommitted:
// a transaction that consumed no input (only ticks) and failed to write
// one of its outputs is aborted, like any other, and retried with a dead
// letter in place of the unwritable output: the timer's other output is
// committed once, never by the failed attempt as well.
func TestAnInputlessTransactionWithAnUnwritableTimerOutputIsAbortedNotCommitted(t *testing.T) {
	onClusters(t, func(t *testing.T, brokers []string, opts []kgo.Opt) {
		maxBytes := "2048"
		r := newRig(t, brokers, opts, 1, nil)
		timers := testenv.Topic(t, brokers, 1, map[string]*string{"max.message.bytes": &maxBytes})
		r.produce(0, "a")
		cfg := r.config()
		newCounter := cfg.NewTask
		cfg.NewTask = func(p int32) stage.Task {
			return &idleTimer{counter: newCounter(p).(*counter), timers: timers}
		}
		cfg.BatchInterval = 20 * time.Millisecond
		cfg.Backoff = backoff.Policy{Min: 10 * time.Millisecond, Max: 50 * time.Millisecond}
		s := r.start(cfg)
		r.awaitOut(s, 2)
		dls, err := r.awaitRecords(s, r.deadLetters, 1)
		if err != nil {
			t.Fatalf("dead letters: %v", err)
		}
		if err := s.stop(); err != nil {
			t.Fatal(err)
		}
		if got := r.outputs(); !equal(got, []string{"a=1", "due=fired"}) {
			t.Fatalf("outputs %v, want a=1 and the timer's due=fired, each once", got)
		}
		var d stage.DeadLetter
		if err := json.Unmarshal(dls[0].Value, &d); err != nil {
			t.Fatal(err)
		}
		if len(dls) != 1 || !d.Timer || d.Topic != timers || string(dls[0].Key) != "timer" {
			t.Fatalf("dead letters %d, first %+v, want one, the timer output's on %s", len(dls), d, timers)
		}
	})
}

// bigOutput is a counter that, for the input keyed "poison", also emits an
// output over the output topic's max.message.bytes.
type bigOutput struct{ *counter }

func (b *bigOutput) Process(r *kgo.Record, out *stage.Out) error {
	if string(r.Key) == "poison" {
		noise := make([]byte, 8192) // incompressible
		rand.Read(noise)
		out.Emit(&kgo.Record{Topic: b.out, Key: r.Key, Value: noise})
	}
	return b.counter.Process(r, out)
}

// TestAStageWhoseDeadLetterCanNeverBeWrittenEitherStops: an input whose
// output can never be written is dead-lettered; when the dead letter
// cannot be written either (the dead-letter topic refuses it), nothing
// would ever let the stage pass that input, so it stops with an error
// saying so, instead of retrying forever.
func TestAStageWhoseDeadLetterCanNeverBeWrittenEitherStops(t *testing.T) {
	onClusters(t, func(t *testing.T, brokers []string, opts []kgo.Opt) {
		limit, tiny := "2048", "64"
		r := newRig(t, brokers, opts, 1, map[string]*string{"max.message.bytes": &limit})
		r.deadLetters = testenv.Topic(t, brokers, 1, map[string]*string{"max.message.bytes": &tiny})
		r.produce(0, "poison")
		cfg := r.config()
		newCounter := cfg.NewTask
		cfg.NewTask = func(p int32) stage.Task { return &bigOutput{newCounter(p).(*counter)} }
		cfg.Backoff = backoff.Policy{Min: 10 * time.Millisecond, Max: 50 * time.Millisecond}
		s := r.start(cfg)
		err := testenv.Await(t, s.done, "the stage whose dead letter cannot be written")
		s.done <- err // for the cleanup's stop
		if err == nil || !strings.Contains(err.Error(), "dead letter") || !strings.Contains(err.Error(), "can never be written") {
			t.Fatalf("Run: %v, want it stopped because the dead letter can never be written", err)
		}
		if got := r.outputs(); len(got) != 0 {
			t.Fatalf("outputs %v, want none: the input was never passed", got)
		}
	})
}
