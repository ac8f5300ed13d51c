package stage

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// These tests drive readUntil, the restore's reading loop, with chosen end
// offsets on kfake: what it does when a changelog has nothing more to give
// (retention deleted the rest, or the records are not there yet), when a
// fetch fails, and when a changelog has records past its end.

// readGuard bounds a test's wait, turning a restore that never ends into
// a failure (no test asserts a duration).
const readGuard = 20 * time.Second

// restoreCluster is a kfake cluster with topics of one partition each.
func restoreCluster(t *testing.T, topics ...string) (*kfake.Cluster, *kgo.Client) {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.FetchMaxWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	if _, err := kadm.NewClient(cl).CreateTopics(context.Background(), 1, 1, nil, topics...); err != nil {
		t.Fatal(err)
	}
	return c, cl
}

// produceTo writes keyed records to partition 0 of topic.
func produceTo(t *testing.T, cl *kgo.Client, topic string, keys ...string) {
	t.Helper()
	for _, k := range keys {
		if err := cl.ProduceSync(context.Background(), &kgo.Record{Topic: topic, Key: []byte(k), Value: []byte("v")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
}

// keyLog is a task that records the topic and key of each record
// restored, and runs onRestore (when set) after each.
type keyLog struct {
	mu        sync.Mutex
	got       []string
	onRestore func()
}

func (k *keyLog) Restore(r *kgo.Record) error {
	k.mu.Lock()
	k.got = append(k.got, r.Topic+":"+string(r.Key))
	k.mu.Unlock()
	if k.onRestore != nil {
		k.onRestore()
	}
	return nil
}
func (k *keyLog) restored() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return slices.Clone(k.got)
}
func (*keyLog) Process(*kgo.Record, *Out) error { return nil }
func (*keyLog) Tick(*Out)                       {}
func (*keyLog) Commit()                         {}
func (*keyLog) Abort()                          {}

// logCapture keeps every log record's message and attributes.
type logCapture struct {
	mu      sync.Mutex
	records []slog.Record
	// notify, when set, is called with each message (outside the lock).
	notify func(msg string)
}

func (l *logCapture) Enabled(context.Context, slog.Level) bool { return true }
func (l *logCapture) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	l.records = append(l.records, r.Clone())
	notify := l.notify
	l.mu.Unlock()
	if notify != nil {
		notify(r.Message)
	}
	return nil
}
func (l *logCapture) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *logCapture) WithGroup(string) slog.Handler      { return l }

// attrs returns the attributes of every record logged with msg.
func (l *logCapture) attrs(msg string) []map[string]any {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]any
	for _, r := range l.records {
		if r.Message != msg {
			continue
		}
		m := map[string]any{}
		r.Attrs(func(a slog.Attr) bool { m[a.Key] = a.Value.Any(); return true })
		out = append(out, m)
	}
	return out
}

// shortIdlePoll makes readUntil's idle poll short for one test.
func shortIdlePoll(t *testing.T) {
	prev := restoreIdlePoll
	restoreIdlePoll = 200 * time.Millisecond
	t.Cleanup(func() { restoreIdlePoll = prev })
}

const waitingMsg = "restore is waiting for changelog records"

func TestARestoreEndsAChangelogWhoseRecordsRetentionDeletedAtItsNewLogStart(t *testing.T) {
	shortIdlePoll(t)
	_, cl := restoreCluster(t, "kept", "gone")
	produceTo(t, cl, "kept", "k1", "k2")
	produceTo(t, cl, "gone", "g1", "g2", "g3")
	// Retention moves gone's log start to its end (3) after the restore
	// took its end offsets: its records will never come.
	offs := kadm.Offsets{}
	offs.AddOffset("gone", 0, 3, -1)
	resp, err := kadm.NewClient(cl).DeleteRecords(context.Background(), offs)
	if err != nil {
		t.Fatal(err)
	}
	if err := resp.Error(); err != nil {
		t.Fatal(err)
	}
	var task keyLog
	var logs logCapture
	ctx, cancel := context.WithTimeout(context.Background(), readGuard)
	defer cancel()
	res, err := readUntil(ctx, cl, map[string]int64{"kept": 2, "gone": 3}, 0, &task, slog.New(&logs), nil)
	if err != nil {
		t.Fatalf("readUntil: %v, want the restore to end once gone's log start reached its end", err)
	}
	if got := task.restored(); !slices.Equal(got, []string{"kept:k1", "kept:k2"}) || res.records != 2 {
		t.Fatalf("restored %v (%d records), want kept's two records only", got, res.records)
	}
	// A changelog read to its end is not waited for: only one not at its
	// end may be named in the warning.
	for _, a := range logs.attrs(waitingMsg) {
		if a["position"].(int64) >= a["end"].(int64) {
			t.Fatalf("warned that it waits for %v at position %v, already its end %v", a["topic"], a["position"], a["end"])
		}
	}
}

func TestARestoreWaitsForChangelogRecordsNotThereYetUntilItsContextEnds(t *testing.T) {
	shortIdlePoll(t)
	prev := restoreLogEvery
	restoreLogEvery = 0 // a progress line at every poll
	t.Cleanup(func() { restoreLogEvery = prev })
	_, cl := restoreCluster(t, "short")
	produceTo(t, cl, "short", "a", "b", "c")
	ctx, cancel := context.WithTimeout(context.Background(), readGuard)
	defer cancel()
	// The end (5) is past the records there (3), and the log start (0)
	// is before it: the records can still come, so the restore waits,
	// and warns that it does, until it is stopped.
	logs := logCapture{notify: func(msg string) {
		if msg == waitingMsg {
			cancel()
		}
	}}
	var task keyLog
	res, err := readUntil(ctx, cl, map[string]int64{"short": 5}, 0, &task, slog.New(&logs), nil)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("readUntil: %v, want it to wait until cancelled", err)
	}
	if res.records != 3 || len(task.restored()) != 3 {
		t.Fatalf("restored %v (%d records), want the 3 there", task.restored(), res.records)
	}
	// Its progress counts what is left to read: 2 offsets once the 3
	// records there are restored.
	progress := logs.attrs("restoring partition")
	if len(progress) < 2 {
		t.Fatalf("progress lines %v, want one per poll", progress)
	}
	if last := progress[len(progress)-1]; last["records"] != int64(3) || last["offsets_left"] != int64(2) {
		t.Fatalf("last progress line %v, want records=3 offsets_left=2", last)
	}
	warned := logs.attrs(waitingMsg)
	if len(warned) == 0 || warned[0]["topic"] != "short" || warned[0]["position"] != int64(3) || warned[0]["end"] != int64(5) {
		t.Fatalf("waiting warnings %v, want short at position 3 of 5", warned)
	}
}

func TestARecordPastOneChangelogsEndDoesNotEndTheRestoreOfAnother(t *testing.T) {
	_, cl := restoreCluster(t, "grown", "late")
	// grown has records past its end (2), written after the restore took
	// its ends; late's one record is written only once grown's first has
	// been restored, so it comes in a later fetch than grown's.
	produceTo(t, cl, "grown", "g1", "g2", "g3", "g4", "g5")
	var once sync.Once
	produced := make(chan error, 1)
	task := keyLog{onRestore: func() {
		once.Do(func() {
			go func() {
				produced <- cl.ProduceSync(context.Background(), &kgo.Record{Topic: "late", Key: []byte("l1"), Value: []byte("v")}).FirstErr()
			}()
		})
	}}
	ctx, cancel := context.WithTimeout(context.Background(), readGuard)
	defer cancel()
	res, err := readUntil(ctx, cl, map[string]int64{"grown": 2, "late": 1}, 0, &task, slog.New(slog.NewTextHandler(io.Discard, nil)), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := <-produced; err != nil {
		t.Fatal(err)
	}
	got := task.restored()
	slices.Sort(got)
	if want := []string{"grown:g1", "grown:g2", "late:l1"}; !slices.Equal(got, want) || res.records != 3 {
		t.Fatalf("restored %v (%d records), want %v: grown up to its end and late's record", got, res.records, want)
	}
}

func TestARestoreFailsOnAFetchError(t *testing.T) {
	c, cl := restoreCluster(t, "denied")
	produceTo(t, cl, "denied", "a")
	c.ControlKey(int16(kmsg.Fetch), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		req := kreq.(*kmsg.FetchRequest)
		resp := req.ResponseKind().(*kmsg.FetchResponse)
		for _, rt := range req.Topics {
			st := kmsg.NewFetchResponseTopic()
			st.Topic, st.TopicID = rt.Topic, rt.TopicID
			for _, rp := range rt.Partitions {
				sp := kmsg.NewFetchResponseTopicPartition()
				sp.Partition = rp.Partition
				sp.ErrorCode = kerr.TopicAuthorizationFailed.Code
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
	ctx, cancel := context.WithTimeout(context.Background(), readGuard)
	defer cancel()
	var task keyLog
	_, err := readUntil(ctx, cl, map[string]int64{"denied": 1}, 0, &task, slog.New(slog.NewTextHandler(io.Discard, nil)), nil)
	if !errors.Is(err, kerr.TopicAuthorizationFailed) || ctx.Err() != nil {
		t.Fatalf("readUntil: %v, want the fetch's TOPIC_AUTHORIZATION_FAILED before the guard", err)
	}
	if got := task.restored(); len(got) != 0 {
		t.Fatalf("restored %v from a denied fetch", got)
	}
}
