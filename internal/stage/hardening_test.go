package stage_test

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/heraldhq/herald/internal/backoff"
	"github.com/heraldhq/herald/internal/metrics"
	"github.com/heraldhq/herald/internal/stage"
	"github.com/heraldhq/herald/internal/testenv"
)

// rig is one counter stage's topics on one cluster.
type rig struct {
	t                  *testing.T
	brokers            []string
	opts               []kgo.Opt
	in, out, changelog string
	group, txnID       string
	deadLetters        string
	partitions         int32
}

func newRig(t *testing.T, brokers []string, opts []kgo.Opt, partitions int32, outConfigs map[string]*string) *rig {
	t.Helper()
	r := &rig{t: t, brokers: brokers, opts: opts, partitions: partitions}
	r.in = testenv.Topic(t, brokers, partitions, nil)
	r.out = testenv.Topic(t, brokers, partitions, outConfigs)
	r.changelog = testenv.Topic(t, brokers, partitions, nil)
	r.deadLetters = testenv.Topic(t, brokers, partitions, nil)
	r.group = "g-" + r.in
	r.txnID = "tx-" + r.in
	return r
}

// forTest returns the rig for a subtest: its helpers then fail the subtest.
func (r *rig) forTest(t *testing.T) *rig {
	c := *r
	c.t = t
	return &c
}

func (r *rig) config() stage.Config {
	return stage.Config{
		Name: "counter", Brokers: r.brokers, Group: r.group, TransactionalID: r.txnID,
		Input: r.in, Changelogs: []string{r.changelog}, Outputs: []string{r.out}, Partitioner: manualFor{r.changelog},
		NewTask: func(p int32) stage.Task {
			return &counter{p: p, out: r.out, changelog: r.changelog, counts: map[string]int{}, pending: map[string]int{}}
		},
		DeadLetterTopic: r.deadLetters,
		SessionTimeout:  6 * time.Second, ClientOpts: r.opts,
	}
}

// running is a stage running in the background.
type running struct {
	*stage.Runner
	cancel context.CancelFunc
	done   chan error
}

func (r *rig) start(cfg stage.Config) *running {
	r.t.Helper()
	st, err := stage.New(cfg)
	if err != nil {
		r.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	run := &running{Runner: st, cancel: cancel, done: make(chan error, 1)}
	go func() { run.done <- st.Run(ctx) }()
	r.t.Cleanup(func() { run.stop() })
	return run
}

// stop stops the stage and returns what Run returned.
func (s *running) stop() error {
	s.cancel()
	err := <-s.done
	s.done <- err // stop is idempotent
	return err
}

// produce writes keyed records to partition p of the input (value nil
// unless given after a "=": "k=value").
func (r *rig) produce(p int32, keys ...string) {
	r.t.Helper()
	cl := testenv.Client(r.t, r.brokers, append([]kgo.Opt{kgo.RecordPartitioner(kgo.ManualPartitioner())}, r.opts...)...)
	for _, k := range keys {
		key, value, _ := strings.Cut(k, "=")
		rec := &kgo.Record{Topic: r.in, Partition: p, Key: []byte(key)}
		if value != "" {
			rec.Value = []byte(value)
		}
		if err := cl.ProduceSync(context.Background(), rec).FirstErr(); err != nil {
			r.t.Fatal(err)
		}
	}
}

// outputs returns the values of the committed output records.
func (r *rig) outputs() []string {
	r.t.Helper()
	var got []string
	for _, rec := range testenv.ReadCommitted(r.t, r.brokers, r.out, r.opts...) {
		got = append(got, string(rec.Value))
	}
	return got
}

// awaitOut waits until the output holds at least n committed records (or
// the stage fails) and returns their values.
// produceDistinct produces n distinct keys, half to each of the first two
// input partitions, and returns the counter's outputs for them: each key
// once, with count 1.
func (r *rig) produceDistinct(n int) []string {
	r.t.Helper()
	want := make([]string, 0, n)
	for p := range int32(2) {
		keys := make([]string, n/2)
		for i := range keys {
			keys[i] = "p" + strconv.Itoa(int(p)) + "k" + strconv.Itoa(i)
			want = append(want, keys[i]+"=1")
		}
		r.produce(p, keys...)
	}
	return want
}

func (r *rig) awaitOut(s *running, n int) []string {
	r.t.Helper()
	got, err := r.awaitOutOrErr(s, n)
	if err != nil {
		r.t.Fatal(err)
	}
	return got
}

// awaitOutOrErr is awaitOut for a goroutine other than the test's, which
// must not call t.Fatal: it returns the failure instead.
func (r *rig) awaitOutOrErr(s *running, n int) ([]string, error) {
	recs, err := r.awaitRecords(s, r.out, n)
	got := make([]string, len(recs))
	for i, rec := range recs {
		got[i] = string(rec.Value)
	}
	if err != nil {
		return got, fmt.Errorf("outputs %v: %w", got, err)
	}
	return got, nil
}

// awaitRecords waits until topic holds at least n committed records (or
// the stage fails, or testenv.Guard passes) and returns them.
func (r *rig) awaitRecords(s *running, topic string, n int) ([]*kgo.Record, error) {
	deadline := time.Now().Add(testenv.Guard())
	for {
		got := testenv.ReadCommitted(r.t, r.brokers, topic, r.opts...)
		if len(got) >= n {
			return got, nil
		}
		select {
		case err := <-s.done:
			s.done <- err
			return got, fmt.Errorf("stage stopped (%v) with %d records on %s, want %d", err, len(got), topic, n)
		default:
		}
		if time.Now().After(deadline) {
			return got, fmt.Errorf("no progress within %v: %d records on %s, want %d", testenv.Guard(), len(got), topic, n)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// logWatch is a slog handler that closes seen when a message is logged,
// and keeps the attributes of each time it is.
type logWatch struct {
	msg  string
	once sync.Once
	seen chan struct{}

	mu    sync.Mutex
	lines []map[string]slog.Value
}

func newLogWatch(msg string) *logWatch { return &logWatch{msg: msg, seen: make(chan struct{})} }

func (w *logWatch) Enabled(context.Context, slog.Level) bool { return true }
func (w *logWatch) Handle(_ context.Context, r slog.Record) error {
	if r.Message != w.msg {
		return nil
	}
	attrs := map[string]slog.Value{}
	r.Attrs(func(a slog.Attr) bool {
		attrs[a.Key] = a.Value
		return true
	})
	w.mu.Lock()
	w.lines = append(w.lines, attrs)
	w.mu.Unlock()
	w.once.Do(func() { close(w.seen) })
	return nil
}

// logged returns the attributes of each line logged so far.
func (w *logWatch) logged() []map[string]slog.Value {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.lines)
}
func (w *logWatch) WithAttrs([]slog.Attr) slog.Handler { return w }
func (w *logWatch) WithGroup(string) slog.Handler      { return w }

// TestTheRestoreLogLineReportsWhatWasRestoredAndHowFast: an operator
// reads a slow rebalance from this line (records, elapsed, records/s).
func TestTheRestoreLogLineReportsWhatWasRestoredAndHowFast(t *testing.T) {
	onClusters(t, func(t *testing.T, brokers []string, opts []kgo.Opt) {
		r := newRig(t, brokers, opts, 1, nil)
		keys := make([]string, 20)
		for i := range keys {
			keys[i] = fmt.Sprint("k", i)
		}
		r.produce(0, keys...)
		first := r.start(r.config())
		r.awaitOut(first, len(keys))
		if err := first.stop(); err != nil {
			t.Fatal(err)
		}
		cfg := r.config()
		watch := newLogWatch("partition restored")
		cfg.Logger = slog.New(watch)
		r.start(cfg)
		select {
		case <-watch.seen:
		case <-time.After(testenv.Guard()):
			t.Fatal("no partition restored")
		}
		line := watch.logged()[0]
		records, el, rate := line["records"].Int64(), line["elapsed"].Duration(), line["records_per_s"].Int64()
		if records != int64(len(keys)) {
			t.Fatalf("records=%d, want the changelog's %d", records, len(keys))
		}
		// elapsed is logged rounded to the millisecond; the rate is of the
		// unrounded time, and of at least a millisecond.
		lo := float64(records) / max((el+time.Millisecond/2).Seconds(), 1e-3)
		hi := float64(records) / max((el-time.Millisecond/2).Seconds(), 1e-3)
		if float64(rate) < lo-1 || float64(rate) > hi+1 {
			t.Fatalf("records_per_s=%d for %d records in %v, want %.0f to %.0f", rate, records, el, lo, hi)
		}
	})
}

func TestRestoreWaitsForTheChangelogsLastTransactionBeforeReadingIt(t *testing.T) {
	onClusters(t, func(t *testing.T, brokers []string, opts []kgo.Opt) {
		r := newRig(t, brokers, opts, 1, nil)
		r.produce(0, "a")
		first := r.start(r.config())
		r.awaitOut(first, 1)
		if err := first.stop(); err != nil {
			t.Fatal(err)
		}

		// The previous owner's last transaction, as the restorer sees it in
		// the window after EndTxn returned: the group's offsets are stable,
		// but the changelog's last stable offset stops before the
		// transaction's seen-set record, whose marker is not written yet.
		prev := testenv.Client(t, brokers, kgo.TransactionalID("prev-"+r.in), kgo.TransactionTimeout(15*time.Minute),
			kgo.RecordPartitioner(kgo.ManualPartitioner()))
		if err := prev.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		if err := prev.ProduceSync(context.Background(), &kgo.Record{Topic: r.changelog, Partition: 0, Key: []byte("a"), Value: []byte("5")}).FirstErr(); err != nil {
			t.Fatal(err)
		}

		r.produce(0, "a")
		cfg := r.config()
		watch := newLogWatch("restore waits for open transactions on the changelog")
		cfg.Logger = slog.New(watch)
		second := r.start(cfg)
		type result struct {
			got []string
			err error
		}
		outs := make(chan result, 1)
		go func() {
			got, err := r.awaitOutOrErr(second, 2)
			outs <- result{got, err}
		}()
		select {
		case <-watch.seen:
			// The restore waits: let the marker arrive.
			if err := prev.EndTransaction(context.Background(), kgo.TryCommit); err != nil {
				t.Fatal(err)
			}
		case res := <-outs:
			t.Fatalf("the restore read the changelog without waiting for its open transaction: outputs %v (%v)", res.got, res.err)
		}
		res := <-outs
		if res.err != nil {
			t.Fatal(res.err)
		}
		got := res.got
		if want := []string{"a=1", "a=6"}; !equal(got, want) {
			t.Fatalf("outputs %v, want %v: the restore must include the previous owner's last transaction", got, want)
		}
	})
}

func TestARestartFencesItsCrashedPredecessorBeforeReading(t *testing.T) {
	// On the real broker only: kfake refuses a TxnOffsetCommit from outside
	// the group, which the predecessor is made of here.
	brokers := testenv.Kafka(t)
	r := newRig(t, brokers, nil, 1, nil)
	r.produce(0, "a", "b")
	ctx := context.Background()

	// The predecessor processed "a" and died between TxnOffsetCommit and
	// EndTxn: its transaction holds the group's offset for the input and
	// a changelog record, with a timeout far longer than this test may
	// run, so only fencing can end it in time.
	pred := testenv.Client(t, brokers, kgo.TransactionalID(r.txnID), kgo.TransactionTimeout(15*time.Minute),
		kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err := pred.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := pred.ProduceSync(ctx, &kgo.Record{Topic: r.changelog, Partition: 0, Key: []byte("a"), Value: []byte("100")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	id, epoch, err := pred.ProducerID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	add := kmsg.NewPtrAddOffsetsToTxnRequest()
	add.TransactionalID, add.ProducerID, add.ProducerEpoch, add.Group = r.txnID, id, epoch, r.group
	if resp, err := add.RequestWith(ctx, pred); err != nil || resp.ErrorCode != 0 {
		t.Fatalf("AddOffsetsToTxn: %v (code %d)", err, resp.ErrorCode)
	}
	commit := kmsg.NewPtrTxnOffsetCommitRequest()
	commit.TransactionalID, commit.Group, commit.ProducerID, commit.ProducerEpoch = r.txnID, r.group, id, epoch
	commit.Generation, commit.MemberID = -1, ""
	ct := kmsg.NewTxnOffsetCommitRequestTopic()
	ct.Topic = r.in
	cp := kmsg.NewTxnOffsetCommitRequestTopicPartition()
	cp.Partition, cp.Offset, cp.LeaderEpoch = 0, 1, -1
	ct.Partitions = append(ct.Partitions, cp)
	commit.Topics = append(commit.Topics, ct)
	resp, err := commit.RequestWith(ctx, pred)
	if err != nil {
		t.Fatal(err)
	}
	if code := resp.Topics[0].Partitions[0].ErrorCode; code != 0 {
		t.Fatalf("TxnOffsetCommit: error code %d", code)
	}
	// No EndTxn: the predecessor is gone.

	s := r.start(r.config())
	got := r.awaitOut(s, 2)
	if want := []string{"a=1", "b=1"}; !equal(got, want) {
		t.Fatalf("outputs %v, want %v: the predecessor's transaction must be aborted, not restored", got, want)
	}
}

// gated is a counter whose Restore announces its partition once and then
// waits for release.
type gated struct {
	*counter
	once    sync.Once
	arrived chan<- int32
	release <-chan struct{}
}

func (g *gated) Restore(r *kgo.Record) error {
	g.once.Do(func() {
		g.arrived <- g.p
		<-g.release
	})
	return g.counter.Restore(r)
}

func TestPartitionsRestoreInParallelAndTheStageIsNotReadyUntilAllHave(t *testing.T) {
	onClusters(t, func(t *testing.T, brokers []string, opts []kgo.Opt) {
		r := newRig(t, brokers, opts, 2, nil)
		r.produce(0, "a")
		r.produce(1, "b")
		first := r.start(r.config())
		r.awaitOut(first, 2)
		if err := first.stop(); err != nil {
			t.Fatal(err)
		}

		arrived := make(chan int32, 2)
		release := make(chan struct{})
		cfg := r.config()
		newCounter := cfg.NewTask
		cfg.NewTask = func(p int32) stage.Task {
			return &gated{counter: newCounter(p).(*counter), arrived: arrived, release: release}
		}
		s := r.start(cfg)
		for i := 0; i < 2; i++ {
			select {
			case <-arrived:
			case <-time.After(testenv.Guard()):
				close(release)
				t.Fatalf("only %d of 2 partitions began restoring: they restore one at a time", i)
			}
		}
		// Both partitions are inside Restore now.
		if s.Ready() || !s.Restoring() {
			t.Fatalf("while restoring: Ready() = %v, Restoring() = %v; want false, true", s.Ready(), s.Restoring())
		}
		close(release)
		r.produce(0, "a")
		r.produce(1, "b")
		got := r.awaitOut(s, 4)
		if want := []string{"a=1", "a=2", "b=1", "b=2"}; !equal(got, want) {
			t.Fatalf("outputs %v, want %v", got, want)
		}
		if !s.Ready() || s.Restoring() {
			t.Fatalf("after restoring: Ready() = %v, Restoring() = %v; want true, false", s.Ready(), s.Restoring())
		}
	})
}

// big is a counter whose output carries the input's value.
type big struct{ *counter }

func (b big) Process(r *kgo.Record, out *stage.Out) error {
	if err := b.counter.Process(r, out); err != nil {
		return err
	}
	if len(r.Value) > 0 {
		out.Records()[out.Len()-2].Value = append([]byte(nil), r.Value...) // the output record
	}
	return nil
}

// newPoisonRig is a rig of one partition whose output topic takes records
// of at most 2 KiB, with keys produced to its input in order; key x
// carries 8 KiB, so a big counter's output for it can never be written
// (MESSAGE_TOO_LARGE).
func newPoisonRig(t *testing.T, brokers []string, opts []kgo.Opt, keys ...string) *rig {
	t.Helper()
	maxBytes := "2048"
	r := newRig(t, brokers, opts, 1, map[string]*string{"max.message.bytes": &maxBytes})
	noise := make([]byte, 8192) // incompressible: the producer compresses batches
	rand.Read(noise)
	for _, k := range keys {
		if k == "x" {
			k = "x=" + string(noise)
		}
		r.produce(0, k)
	}
	return r
}

// holdSecond is a big counter that, the second time it processes key,
// signals held and waits for release.
type holdSecond struct {
	big
	key           string
	seen          int
	held, release chan struct{}
}

func (h *holdSecond) Process(r *kgo.Record, out *stage.Out) error {
	if string(r.Key) == h.key {
		if h.seen++; h.seen == 2 {
			close(h.held)
			<-h.release
		}
	}
	return h.big.Process(r, out)
}

// TestIsolationAfterAPoisonedBatchEndsAtThatBatchsLastRecord: a batch
// with an output that can never be written is reprocessed one record per
// transaction up to its last record, and no further: the records after it
// are batched again.
func TestIsolationAfterAPoisonedBatchEndsAtThatBatchsLastRecord(t *testing.T) {
	onClusters(t, func(t *testing.T, brokers []string, opts []kgo.Opt) {
		// All in the log before the stage starts: its first batch holds them.
		r := newPoisonRig(t, brokers, opts, "a", "x", "c", "d", "g")
		cfg := r.config()
		reg := metrics.NewRegistry()
		cfg.Metrics = reg
		newCounter := cfg.NewTask
		hold := &holdSecond{key: "g", held: make(chan struct{}), release: make(chan struct{})}
		cfg.NewTask = func(p int32) stage.Task {
			hold.big = big{newCounter(p).(*counter)}
			return hold
		}
		s := r.start(cfg)
		// g a second time: alone, the poisoned batch's last record.
		select {
		case <-hold.held:
		case <-time.After(testenv.Guard()):
			t.Fatal("g was not processed a second time")
		}
		// h, i and j in one record batch, in the log before g's transaction
		// ends: the consumer fetches them together.
		cl := testenv.Client(t, brokers, append([]kgo.Opt{kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(time.Second)}, opts...)...)
		for _, k := range []string{"h", "i", "j"} {
			cl.Produce(context.Background(), &kgo.Record{Topic: r.in, Partition: 0, Key: []byte(k)}, nil)
		}
		if err := cl.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
		close(hold.release)
		got := r.awaitOut(s, 7)
		if want := []string{"a=1", "c=1", "d=1", "g=1", "h=1", "i=1", "j=1"}; !equal(got, want) {
			t.Fatalf("outputs %v, want %v", got, want)
		}
		// Aborted: the first batch, then x alone. Committed: a, x's dead
		// letter, c, d, g one at a time, then h, i and j together.
		committed := reg.Counter("herald_stage_transactions_total", "", "stage", "counter", "result", "committed").Value()
		aborted := reg.Counter("herald_stage_transactions_total", "", "stage", "counter", "result", "aborted").Value()
		if committed != 6 || aborted != 2 {
			t.Fatalf("%d transactions committed and %d aborted, want 6 and 2: a, x's dead letter, c, d and g alone, then h, i and j in one", committed, aborted)
		}
	})
}

func TestARecordWhoseOutputCanNeverBeWrittenIsDeadLetteredAndThePartitionMovesOn(t *testing.T) {
	onClusters(t, func(t *testing.T, brokers []string, opts []kgo.Opt) {
		r := newPoisonRig(t, brokers, opts, "a", "x", "b")
		cfg := r.config()
		newCounter := cfg.NewTask
		cfg.NewTask = func(p int32) stage.Task { return big{newCounter(p).(*counter)} }
		s := r.start(cfg)
		got := r.awaitOut(s, 2)
		if want := []string{"a=1", "b=1"}; !equal(got, want) {
			t.Fatalf("%d outputs (%d bytes), want %v", len(got), len(strings.Join(got, "")), want)
		}
		dls := testenv.ReadCommitted(t, brokers, r.deadLetters, opts...)
		if len(dls) != 1 {
			t.Fatalf("%d dead letters, want 1", len(dls))
		}
		var dl stage.DeadLetter
		if err := json.Unmarshal(dls[0].Value, &dl); err != nil {
			t.Fatal(err)
		}
		if dl.Topic != r.in || dl.Partition != 0 || dl.Offset != 1 || !strings.Contains(dl.Reason, "MESSAGE_TOO_LARGE") || string(dls[0].Key) != "x" {
			t.Fatalf("dead letter %+v (key %q), want input %s/0@1, key x, reason MESSAGE_TOO_LARGE", dl, dls[0].Key, r.in)
		}
		// The dead-lettered record changed no state: the changelog has a and b only.
		var keys []string
		for _, rec := range testenv.ReadCommitted(t, brokers, r.changelog, opts...) {
			keys = append(keys, string(rec.Key))
		}
		if !equal(keys, []string{"a", "b"}) {
			t.Fatalf("changelog keys %v, want [a b]", keys)
		}
	})
}

func TestAStageRefusesAChangelogThatIsNotCoPartitionedWithItsInput(t *testing.T) {
	onClusters(t, func(t *testing.T, brokers []string, opts []kgo.Opt) {
		r := newRig(t, brokers, opts, 2, nil)
		r.changelog = testenv.Topic(t, brokers, 3, nil)
		st, err := stage.New(r.config())
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), testenv.Guard())
		defer cancel()
		err = st.Run(ctx)
		if err == nil {
			t.Fatal("Run started with a 3-partition changelog on a 2-partition input")
		}
		for _, want := range []string{r.changelog, "3 partitions", r.in, "has 2"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not name %q", err, want)
			}
		}
	})
}

// TestAStageStartsOnlyOnceEveryTopicItWritesExists: a stage whose output
// or dead-letter topic does not exist yet starts no session (it commits
// nothing) and says which topic is missing; once the topic is created it
// starts, after a backoff, and copies its input once.
func TestAStageStartsOnlyOnceEveryTopicItWritesExists(t *testing.T) {
	cases := []struct {
		name    string
		missing func(r *rig) *string // the rig's topic to leave missing
	}{
		{"an output topic", func(r *rig) *string { return &r.out }},
		{"the dead-letter topic", func(r *rig) *string { return &r.deadLetters }},
	}
	for _, c := range cases {
		t.Run("without "+c.name, func(t *testing.T) {
			onClusters(t, func(t *testing.T, brokers []string, opts []kgo.Opt) {
				r := newRig(t, brokers, opts, 1, nil)
				missing := c.missing(r)
				*missing += "-later"
				r.produce(0, "a", "b")
				watch := newLogWatch("stage session failed; starting a new one after a backoff (its partitions are restored again)")
				cfg := r.config()
				cfg.Logger = slog.New(watch)
				cfg.Backoff = backoff.Policy{Min: 10 * time.Millisecond, Max: 50 * time.Millisecond}
				s := r.start(cfg)
				testenv.Await(t, watch.seen, "a session to fail")
				for len(watch.logged()) < 3 {
					time.Sleep(10 * time.Millisecond)
				}
				for _, line := range watch.logged() {
					if err := line["err"].String(); !strings.Contains(err, *missing) || !strings.Contains(err, "does not exist") {
						t.Fatalf("a session failed with %q, want it to name the missing topic %s", err, *missing)
					}
				}
				adm := kadm.NewClient(testenv.Client(t, brokers, opts...))
				ctx := testenv.Guarded(t)
				if committed, err := adm.FetchOffsets(ctx, r.group); err == nil && len(committed.Offsets()) > 0 {
					t.Fatalf("offsets %v committed while %s was missing", committed.Offsets(), *missing)
				}
				if _, err := adm.CreateTopic(ctx, 1, 1, nil, *missing); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _, _ = adm.DeleteTopic(context.Background(), *missing) })
				if got, want := r.awaitOut(s, 2), []string{"a=1", "b=1"}; !equal(got, want) {
					t.Fatalf("outputs %v, want %v", got, want)
				}
			})
		})
	}
}

func TestAStageWhoseGroupLostItsOffsetsRefusesToReplayUnlessTold(t *testing.T) {
	onClusters(t, func(t *testing.T, brokers []string, opts []kgo.Opt) {
		r := newRig(t, brokers, opts, 1, nil)
		r.produce(0, "a", "b")
		first := r.start(r.config())
		r.awaitOut(first, 2)
		if err := first.stop(); err != nil {
			t.Fatal(err)
		}
		loseOffsets := func(t *testing.T) {
			t.Helper()
			adm := kadm.NewClient(testenv.Client(t, brokers))
			resp, err := adm.DeleteGroup(context.Background(), r.group)
			if err == nil {
				err = resp.Err
			}
			if err != nil {
				t.Fatalf("delete group %s: %v", r.group, err)
			}
		}
		loseOffsets(t)

		t.Run("without a reset flag it refuses to start", func(t *testing.T) {
			r := r.forTest(t)
			s := r.start(r.config())
			select {
			case err := <-s.done:
				s.done <- err
				if err == nil || !strings.Contains(err.Error(), "--reset-offsets") {
					t.Fatalf("Run returned %v, want a refusal naming --reset-offsets", err)
				}
			case <-time.After(testenv.Guard()):
				t.Fatal("the stage is running on a group that lost its offsets")
			}
			if got := r.outputs(); len(got) != 2 {
				t.Fatalf("outputs %v: the refusing stage wrote", got)
			}
		})
		t.Run("with --reset-offsets=latest it skips the input it has not seen", func(t *testing.T) {
			r := r.forTest(t)
			r.produce(0, "c")
			cfg := r.config()
			cfg.ResetOffsets = stage.ResetLatest
			s := r.start(cfg)
			// Its position is the end when it starts: keep writing d until
			// one is processed.
			var got []string
			for deadline := time.Now().Add(testenv.Guard()); ; {
				r.produce(0, "d")
				if got = r.awaitOut(s, 2); len(got) > 2 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("no d processed: outputs %v", got)
				}
				time.Sleep(500 * time.Millisecond)
			}
			if err := s.stop(); err != nil {
				t.Fatal(err)
			}
			for _, v := range got {
				if strings.HasPrefix(v, "c=") {
					t.Fatalf("outputs %v: c was before the reset position", got)
				}
			}
			if got[2] != "d=1" {
				t.Fatalf("outputs %v, want d=1 after a=1 b=1", got)
			}
		})
		t.Run("with --reset-offsets=earliest it re-decides the input against its restored state", func(t *testing.T) {
			r := r.forTest(t)
			loseOffsets(t)
			before := len(r.outputs())
			cfg := r.config()
			cfg.ResetOffsets = stage.ResetEarliest
			s := r.start(cfg)
			got := r.awaitOut(s, before+2)
			// The replay starts over at a: a counted on from the state (a=2), never a=1 again.
			if got[before] != "a=2" || got[before+1] != "b=2" {
				t.Fatalf("outputs %v: the replay must continue from the restored counts (a=2, b=2)", got)
			}
		})
		t.Run("with the group's offset set to 0 by hand it starts without a reset flag and replays against its restored state", func(t *testing.T) {
			// An operator's reset to the earliest offset (kafka-consumer-groups
			// --reset-offsets --to-earliest) commits offset 0: an explicit
			// position, not a lost one.
			r := r.forTest(t)
			loseOffsets(t)
			adm := kadm.NewClient(testenv.Client(t, brokers, opts...))
			var offs kadm.Offsets
			offs.Add(kadm.Offset{Topic: r.in, Partition: 0, At: 0, LeaderEpoch: -1})
			if resp, err := adm.CommitOffsets(context.Background(), r.group, offs); err != nil || resp.Error() != nil {
				t.Fatalf("commit offset 0: %v %v", err, resp.Error())
			}
			before := len(r.outputs())
			s := r.start(r.config())
			got, err := r.awaitOutOrErr(s, before+2)
			if err != nil {
				t.Fatal(err)
			}
			if got[before] != "a=3" || got[before+1] != "b=3" {
				t.Fatalf("outputs %v: the replay from offset 0 must continue from the restored counts (a=3, b=3)", got)
			}
		})
	})
}

func TestASingleRecordIsCommittedWithoutWaitingOutTheBatchInterval(t *testing.T) {
	onClusters(t, func(t *testing.T, brokers []string, opts []kgo.Opt) {
		r := newRig(t, brokers, opts, 1, nil)
		cfg := r.config()
		cfg.BatchInterval = time.Hour
		s := r.start(cfg)
		r.produce(0, "a")
		if got := r.awaitOut(s, 1); !equal(got, []string{"a=1"}) {
			t.Fatalf("outputs %v, want [a=1]", got)
		}
	})
}

// equal compares two lists of outputs as multisets.
func equal(got, want []string) bool {
	g, w := slices.Clone(got), slices.Clone(want)
	slices.Sort(g)
	slices.Sort(w)
	return slices.Equal(g, w)
}

func TestAStageStopsWhileARestoreWaits(t *testing.T) {
	onClusters(t, func(t *testing.T, brokers []string, opts []kgo.Opt) {
		r := newRig(t, brokers, opts, 1, nil)
		open := testenv.Client(t, brokers, kgo.TransactionalID("open-"+r.in), kgo.TransactionTimeout(15*time.Minute),
			kgo.RecordPartitioner(kgo.ManualPartitioner()))
		if err := open.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		if err := open.ProduceSync(context.Background(), &kgo.Record{Topic: r.changelog, Partition: 0, Key: []byte("a"), Value: []byte("1")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
		cfg := r.config()
		watch := newLogWatch("restore waits for open transactions on the changelog")
		cfg.Logger = slog.New(watch)
		s := r.start(cfg)
		select {
		case <-watch.seen:
		case <-time.After(testenv.Guard()):
			t.Fatal("the restore did not wait for the open transaction")
		}
		stopped := make(chan error, 1)
		go func() { stopped <- s.stop() }()
		select {
		case err := <-stopped:
			if err != nil {
				t.Fatalf("Run returned %v on shutdown, want nil", err)
			}
		case <-time.After(testenv.Guard()):
			t.Fatal("Run did not return while its restore waited")
		}
		if err := open.EndTransaction(context.Background(), kgo.TryAbort); err != nil {
			t.Fatal(err)
		}
	})
}

// lateTopic is a counter that also writes each input to a topic that does
// not exist yet.
type lateTopic struct {
	*counter
	late string
}

func (l lateTopic) Process(r *kgo.Record, out *stage.Out) error {
	out.Emit(&kgo.Record{Topic: l.late, Key: r.Key, Value: r.Key})
	return l.counter.Process(r, out)
}

func TestARetriableProduceErrorIsRetriedAfterABackoffUntilItClears(t *testing.T) {
	onClusters(t, func(t *testing.T, brokers []string, opts []kgo.Opt) {
		r := newRig(t, brokers, opts, 1, nil)
		late := sanitize("late-" + t.Name())
		r.produce(0, "a", "b")
		cfg := r.config()
		newCounter := cfg.NewTask
		cfg.NewTask = func(p int32) stage.Task { return lateTopic{newCounter(p).(*counter), late} }
		cfg.Backoff = backoff.Policy{Min: 10 * time.Millisecond, Max: 100 * time.Millisecond}
		// The producer gives a missing topic's records up after a few
		// metadata loads; quick loads let a retry fail again within the
		// transaction timeout, so retries follow each other in one session.
		cfg.ClientOpts = append(slices.Clone(cfg.ClientOpts), kgo.MetadataMinAge(50*time.Millisecond))
		watch := newLogWatch("transaction aborted after a produce error; retrying after a backoff")
		cfg.Logger = slog.New(watch)
		s := r.start(cfg)
		// The missing topic (UNKNOWN_TOPIC_OR_PARTITION) is retriable: wait
		// for two retries, which must count up.
		for deadline := time.Now().Add(testenv.Guard()); len(watch.logged()) < 2; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%d retries after a produce error, want 2", len(watch.logged()))
			}
		}
		for i, line := range watch.logged()[:2] {
			if got := line["retry"].Int64(); got != int64(i+1) {
				t.Fatalf("retry %d logged as retry=%d, want %d", i+1, got, i+1)
			}
		}
		adm := kadm.NewClient(testenv.Client(t, brokers, opts...))
		if _, err := adm.CreateTopic(context.Background(), 1, 1, nil, late); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { adm.DeleteTopic(context.Background(), late) })
		if got := r.awaitOut(s, 2); !equal(got, []string{"a=1", "b=1"}) {
			t.Fatalf("outputs %v, want a=1 b=1 once each after the retries", got)
		}
		var keys []string
		for _, rec := range testenv.ReadCommitted(t, brokers, late, opts...) {
			keys = append(keys, string(rec.Key))
		}
		if !equal(keys, []string{"a", "b"}) {
			t.Fatalf("late topic %v, want a and b once each", keys)
		}
		if dls := testenv.ReadCommitted(t, brokers, r.deadLetters, opts...); len(dls) != 0 {
			t.Fatalf("%d dead letters: a retriable error must not dead-letter", len(dls))
		}
	})
}

// awaitNoOpenTransaction waits until no transaction is open on the output
// topic (its last stable offsets reach its ends) and fails the test if
// one still is after testenv.Guard: a guard for the markers Kafka writes
// after EndTxn returns, not a timed assertion.
func (r *rig) awaitNoOpenTransaction() {
	r.t.Helper()
	ctx := testenv.Guarded(r.t)
	cl := testenv.Client(r.t, r.brokers, r.opts...)
	parts := make([]int32, r.partitions)
	for i := range parts {
		parts[i] = int32(i)
	}
	deadline := time.Now().Add(testenv.Guard())
	for {
		stable, err := stage.LastStableOffsets(ctx, cl, r.out, parts...)
		if err != nil {
			r.t.Fatal(err)
		}
		ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, r.out)
		if err != nil {
			r.t.Fatal(err)
		}
		open := false
		ends.Each(func(o kadm.ListedOffset) {
			if o.Err != nil || stable[o.Partition] != o.Offset {
				open = true
			}
		})
		if !open {
			return
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("a transaction is still open on %s: last stable offsets %v below the ends", r.out, stable)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// awaitUncommittedOutput waits until the output topic holds a record,
// committed or not (its high watermark moved), and fails the test if none
// comes within testenv.Guard.
func (r *rig) awaitUncommittedOutput() {
	r.t.Helper()
	ctx := testenv.Guarded(r.t)
	adm := kadm.NewClient(testenv.Client(r.t, r.brokers, r.opts...))
	for deadline := time.Now().Add(testenv.Guard()); ; time.Sleep(10 * time.Millisecond) {
		ends, err := adm.ListEndOffsets(ctx, r.out)
		if err != nil {
			r.t.Fatal(err)
		}
		var n int64
		ends.Each(func(o kadm.ListedOffset) { n += o.Offset })
		if n > 0 {
			return
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("no output reached %s", r.out)
		}
	}
}

// silent is a counter that emits nothing for keys starting with "quiet".
type silent struct{ *counter }

func (s silent) Process(r *kgo.Record, out *stage.Out) error {
	if strings.HasPrefix(string(r.Key), "quiet") {
		return nil
	}
	return s.counter.Process(r, out)
}

// TestABatchWhoseInputsEmitNothingStillCommitsTheirOffsets: a transaction
// begins with its outputs; a batch that has none still commits its input
// offsets, in a transaction of offsets alone, and the stage goes on.
func TestABatchWhoseInputsEmitNothingStillCommitsTheirOffsets(t *testing.T) {
	onClusters(t, func(t *testing.T, brokers []string, opts []kgo.Opt) {
		r := newRig(t, brokers, opts, 1, nil)
		r.produce(0, "quiet1", "quiet2")
		cfg := r.config()
		newCounter := cfg.NewTask
		cfg.NewTask = func(p int32) stage.Task { return silent{newCounter(p).(*counter)} }
		s := r.start(cfg)

		ctx := testenv.Guarded(t)
		adm := kadm.NewClient(testenv.Client(t, brokers, opts...))
		for deadline := time.Now().Add(testenv.Guard()); ; time.Sleep(20 * time.Millisecond) {
			offs, err := adm.FetchOffsets(ctx, r.group)
			if err == nil {
				if o, ok := offs.Lookup(r.in, 0); ok && o.Err == nil && o.At == 2 {
					break
				}
			}
			select {
			case err := <-s.done:
				s.done <- err
				t.Fatalf("the stage stopped before committing the silent batch's offsets: %v", err)
			default:
			}
			if time.Now().After(deadline) {
				t.Fatalf("the group's offset of %s/0 never reached 2 (the end of two inputs that emit nothing): %v", r.in, offs)
			}
		}
		r.produce(0, "a")
		if got := r.awaitOut(s, 1); !equal(got, []string{"a=1"}) {
			t.Fatalf("committed outputs %v after the silent batch, want [a=1]", got)
		}
	})
}
