package stage_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldhq/herald/internal/embedded"
	"github.com/heraldhq/herald/internal/stage"
	"github.com/heraldhq/herald/internal/testenv"
)

// counter is the smallest stateful task: it counts records per key, keeps
// the counts in a changelog, and emits "key=count" for every input.
type counter struct {
	p               int32
	out, changelog  string
	counts, pending map[string]int
}

func (c *counter) Restore(r *kgo.Record) error {
	n, err := strconv.Atoi(string(r.Value))
	c.counts[string(r.Key)] = n
	return err
}

func (c *counter) get(k string) int {
	if n, ok := c.pending[k]; ok {
		return n
	}
	return c.counts[k]
}

func (c *counter) Process(r *kgo.Record, out *stage.Out) error {
	k := string(r.Key)
	n := c.get(k) + 1
	c.pending[k] = n
	out.Emit(&kgo.Record{Topic: c.out, Key: r.Key, Value: []byte(fmt.Sprintf("%s=%d", k, n))})
	out.Emit(&kgo.Record{Topic: c.changelog, Key: r.Key, Value: []byte(strconv.Itoa(n)), Partition: c.p})
	return nil
}

func (c *counter) Tick(*stage.Out) {}
func (c *counter) Commit() {
	for k, n := range c.pending {
		c.counts[k] = n
	}
	clear(c.pending)
}
func (c *counter) Abort() { clear(c.pending) }

// manualFor sends changelog records to Record.Partition, others by key.
type manualFor struct{ topic string }

func (m manualFor) ForTopic(t string) kgo.TopicPartitioner {
	if t == m.topic {
		return kgo.ManualPartitioner().ForTopic(t)
	}
	return kgo.StickyKeyPartitioner(nil).ForTopic(t)
}

func onClusters(t *testing.T, test func(t *testing.T, brokers []string, opts []kgo.Opt)) {
	t.Run("on kfake", func(t *testing.T) {
		c, err := kfake.NewCluster(kfake.NumBrokers(1))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close) // after the clients, which close in later-registered cleanups
		// kfake can hold a fetch for its whole max wait (5 s by default)
		// though records are there to read: a short wait keeps the fast
		// suite fast (and the mutation run, which runs it per mutant).
		test(t, c.ListenAddrs(), append(embedded.ClientOpts(), kgo.FetchMaxWait(100*time.Millisecond)))
	})
	t.Run("on the real Kafka broker", func(t *testing.T) {
		test(t, testenv.Kafka(t), nil)
	})
}

func TestAStageRestoresItsStateAndContinuesAfterARestart(t *testing.T) {
	onClusters(t, func(t *testing.T, brokers []string, opts []kgo.Opt) {
		ctx := testenv.Guarded(t)
		admCl := testenv.Client(t, brokers, opts...)
		adm := kadm.NewClient(admCl)
		in, out, changelog := sanitize("in-"+t.Name()), sanitize("out-"+t.Name()), sanitize("log-"+t.Name())
		for _, name := range []string{in, out, changelog} {
			if _, err := adm.CreateTopic(ctx, 2, 1, nil, name); err != nil {
				t.Fatal(err)
			}
		}
		produce := func(keys ...string) {
			cl := testenv.Client(t, brokers, opts...)
			for _, k := range keys {
				if err := cl.ProduceSync(ctx, &kgo.Record{Topic: in, Key: []byte(k)}).FirstErr(); err != nil {
					t.Fatal(err)
				}
			}
		}
		run := func(instance string, want int) {
			r, err := stage.New(stage.Config{
				Name: "counter", Brokers: brokers, Group: "g-" + in, TransactionalID: "tx-" + in + instance,
				Input: in, Changelogs: []string{changelog}, Partitioner: manualFor{changelog},
				NewTask: func(p int32) stage.Task {
					return &counter{p: p, out: out, changelog: changelog, counts: map[string]int{}, pending: map[string]int{}}
				},
				SessionTimeout: 6 * time.Second, ClientOpts: opts,
			})
			if err != nil {
				t.Fatal(err)
			}
			rctx, cancel := context.WithCancel(ctx)
			var wg sync.WaitGroup
			wg.Add(1)
			go func() { defer wg.Done(); r.Run(rctx) }()
			deadline := time.Now().Add(testenv.Guard())
			for len(testenv.ReadCommitted(t, brokers, out, opts...)) < want && time.Now().Before(deadline) {
				time.Sleep(200 * time.Millisecond)
			}
			cancel()
			wg.Wait()
		}

		produce("a", "b", "a")
		run("1", 3)
		produce("a", "b")
		run("2", 5) // a fresh instance: counts come back from the changelog

		got := map[string]bool{}
		for _, r := range testenv.ReadCommitted(t, brokers, out, opts...) {
			if got[string(r.Value)] {
				t.Errorf("%s emitted twice", r.Value)
			}
			got[string(r.Value)] = true
		}
		for _, want := range []string{"a=1", "a=2", "a=3", "b=1", "b=2"} {
			if !got[want] {
				t.Errorf("missing %s in %v", want, got)
			}
		}
		if len(got) != 5 {
			t.Fatalf("outputs %v, want exactly a=1..3 and b=1..2", got)
		}
	})
}

func sanitize(s string) string {
	b := []byte(s)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-') {
			b[i] = '-'
		}
	}
	return fmt.Sprintf("%s-%d", b, time.Now().UnixNano()%1e9)
}

// caller is a task whose outputs need work after their transaction commits,
// as a sink's provider calls do: Process emits an intent, AfterCommit does
// the work, and Tick emits its result.
type caller struct {
	out            string
	staged, toCall []string
	results        []string
	emitted        int
	overtaken      *int // Process calls that found a result not yet committed
}

func (c *caller) Restore(*kgo.Record) error { return nil }
func (c *caller) Process(r *kgo.Record, out *stage.Out) error {
	if len(c.results) > 0 {
		*c.overtaken++
	}
	c.staged = append(c.staged, string(r.Key))
	out.Emit(&kgo.Record{Topic: c.out, Key: r.Key, Value: []byte("intent")})
	return nil
}
func (c *caller) Tick(out *stage.Out) {
	for _, k := range c.results {
		out.Emit(&kgo.Record{Topic: c.out, Key: []byte(k), Value: []byte("result")})
	}
	c.emitted = len(c.results)
}
func (c *caller) Commit() {
	c.toCall = append(c.toCall, c.staged...)
	c.staged = nil
	c.results = c.results[c.emitted:]
	c.emitted = 0
}
func (c *caller) Abort() { c.staged, c.emitted = nil, 0 }

func TestResultsOfWorkDoneAfterACommitAreCommittedBeforeMoreInputIsProcessed(t *testing.T) {
	onClusters(t, func(t *testing.T, brokers []string, opts []kgo.Opt) {
		ctx := testenv.Guarded(t)
		adm := kadm.NewClient(testenv.Client(t, brokers, opts...))
		in, out := sanitize("in-"+t.Name()), sanitize("out-"+t.Name())
		for _, name := range []string{in, out} {
			if _, err := adm.CreateTopic(ctx, 1, 1, nil, name); err != nil {
				t.Fatal(err)
			}
		}
		var mu sync.Mutex
		tasks := map[int32]*caller{}
		overtaken := 0
		r, err := stage.New(stage.Config{
			Name: "caller", Brokers: brokers, Group: "g-" + in, TransactionalID: "tx-" + in, Input: in,
			NewTask: func(p int32) stage.Task {
				mu.Lock()
				defer mu.Unlock()
				tasks[p] = &caller{out: out, overtaken: &overtaken}
				return tasks[p]
			},
			AfterCommit: func(context.Context) bool {
				mu.Lock()
				defer mu.Unlock()
				more := false
				for _, c := range tasks {
					c.results = append(c.results, c.toCall...)
					more = more || len(c.toCall) > 0
					c.toCall = nil
				}
				return more
			},
			BatchInterval: 10 * time.Millisecond, SessionTimeout: 6 * time.Second, ClientOpts: opts,
		})
		if err != nil {
			t.Fatal(err)
		}
		rctx, cancel := context.WithCancel(ctx)
		var wg sync.WaitGroup
		wg.Add(1)
		go func() { defer wg.Done(); r.Run(rctx) }()
		cl := testenv.Client(t, brokers, opts...)
		const n = 200
		for i := range n {
			if err := cl.ProduceSync(ctx, &kgo.Record{Topic: in, Key: []byte(strconv.Itoa(i))}).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
		deadline := time.Now().Add(testenv.Guard())
		for len(testenv.ReadCommitted(t, brokers, out, opts...)) < 2*n && time.Now().Before(deadline) {
			time.Sleep(100 * time.Millisecond)
		}
		cancel()
		wg.Wait()

		seen := map[string]int{}
		for _, rec := range testenv.ReadCommitted(t, brokers, out, opts...) {
			seen[string(rec.Key)+"/"+string(rec.Value)]++
		}
		for i := range n {
			for _, v := range []string{"intent", "result"} {
				if k := strconv.Itoa(i) + "/" + v; seen[k] != 1 {
					t.Errorf("%s committed %d times, want once", k, seen[k])
				}
			}
		}
		if overtaken > 0 {
			t.Errorf("%d records were processed while an earlier result was still uncommitted", overtaken)
		}
	})
}
