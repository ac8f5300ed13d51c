package route

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldhq/herald/internal/embedded"
	"github.com/heraldhq/herald/internal/testenv"
	"github.com/heraldhq/herald/schemas"
)

// tableRig is a Table over two topics of two partitions on kfake (a fast
// test: the table's reading and its Sync, not the broker's compaction).
type tableRig struct {
	t              *testing.T
	brokers        []string
	devices, prefs string
	opts           []kgo.Opt
	writer         *kgo.Client
	table          *Table
	cancel         context.CancelFunc
	done           chan error
}

func newTableRig(t *testing.T) *tableRig { return newTableRigRunning(t, true) }

// newTableRigRunning builds the rig; with run false the table never reads
// (its client stays open for Sync's listing of the end offsets).
func newTableRigRunning(t *testing.T, run bool) *tableRig {
	t.Helper()
	c := testenv.Kfake(t)
	r := &tableRig{t: t, brokers: c.ListenAddrs(), done: make(chan error, 1)}
	r.opts = append(embedded.ClientOpts(), kgo.SeedBrokers(r.brokers...), kgo.FetchMaxWait(100*time.Millisecond))
	r.devices = testenv.Topic(t, r.brokers, 2, nil)
	r.prefs = testenv.Topic(t, r.brokers, 2, nil)
	r.writer = testenv.Client(t, r.brokers, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	var err error
	r.table, err = NewTable(r.devices, r.prefs, nil, r.opts...)
	if err != nil {
		t.Fatal(err)
	}
	if !run {
		t.Cleanup(r.table.cl.Close)
		return r
	}
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	go func() { r.done <- r.table.Run(ctx) }()
	t.Cleanup(r.stop)
	return r
}

func (r *tableRig) stop() {
	if r.cancel != nil {
		r.cancel()
		if err := testenv.Await(r.t, r.done, "the cancelled table"); err != nil {
			r.t.Errorf("table run: %v", err)
		}
		r.cancel = nil
	}
}

// put writes value (nil: a tombstone) under key to partition p of topic.
func (r *tableRig) put(topic string, p int32, key string, v schemas.Record) {
	r.t.Helper()
	rec := &kgo.Record{Topic: topic, Partition: p, Key: []byte(key)}
	if v != nil {
		b, err := schemas.Encode(v)
		if err != nil {
			r.t.Fatal(err)
		}
		rec.Value = b
	}
	if err := r.writer.ProduceSync(context.Background(), rec).FirstErr(); err != nil {
		r.t.Fatal(err)
	}
}

func (r *tableRig) putRaw(topic string, p int32, key string, value []byte) {
	r.t.Helper()
	if err := r.writer.ProduceSync(context.Background(), &kgo.Record{Topic: topic, Partition: p, Key: []byte(key), Value: value}).FirstErr(); err != nil {
		r.t.Fatal(err)
	}
}

func (r *tableRig) sync(p int32) {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second) // a guard, not a timed assertion
	defer cancel()
	if err := r.table.Sync(ctx, p); err != nil {
		r.t.Fatal(err)
	}
}

func device(tenant, recipient, id string) *schemas.Device {
	return &schemas.Device{Tenant: tenant, Recipient: recipient, DeviceID: id, Platform: "ios", Token: "tok-" + id, Enabled: true}
}

func deviceIDs(who Recipient) string {
	var ids []string
	for _, d := range who.Devices {
		ids = append(ids, d.DeviceID)
	}
	return strings.Join(ids, ",")
}

func TestTheRouteTableSeesEveryChangeWrittenBeforeSync(t *testing.T) {
	t.Run("devices written before Sync are seen, sorted by id", func(t *testing.T) {
		r := newTableRig(t)
		for _, id := range []string{"d2", "d1", "d3"} {
			r.put(r.devices, 1, schemas.DeviceKey("acme", "u/1", id), device("acme", "u/1", id))
		}
		r.sync(1)
		if got := deviceIDs(r.table.Recipient("acme", "u/1")); got != "d1,d2,d3" {
			t.Fatalf("devices %q, want d1,d2,d3", got)
		}
		if got := r.table.Recipient("acme", "u/2"); len(got.Devices) != 0 || got.Prefs != nil {
			t.Fatalf("an unknown recipient has %+v, want nothing", got)
		}
	})
	t.Run("a device tombstone removes that device only, and the last one the recipient", func(t *testing.T) {
		r := newTableRig(t)
		r.put(r.devices, 0, schemas.DeviceKey("acme", "u1", "a/b"), device("acme", "u1", "a/b"))
		r.put(r.devices, 0, schemas.DeviceKey("acme", "u1", "c"), device("acme", "u1", "c"))
		r.put(r.devices, 0, schemas.DeviceKey("acme", "u1", "a/b"), nil)
		r.sync(0)
		if got := deviceIDs(r.table.Recipient("acme", "u1")); got != "c" {
			t.Fatalf("devices %q after a tombstone of a/b, want c", got)
		}
		r.put(r.devices, 0, schemas.DeviceKey("acme", "u1", "c"), nil)
		r.sync(0)
		r.table.mu.Lock()
		_, kept := r.table.devices[schemas.RecipientKey("acme", "u1")]
		r.table.mu.Unlock()
		if kept {
			t.Fatal("a recipient whose last device was tombstoned is still in the table")
		}
	})
	t.Run("preferences are replaced by a newer value and removed by a tombstone", func(t *testing.T) {
		r := newTableRig(t)
		key := schemas.RecipientKey("acme", "u1")
		r.put(r.prefs, 1, key, &schemas.Preferences{Tenant: "acme", Recipient: "u1", OptedOutTypes: []string{"a"}})
		r.put(r.prefs, 1, key, &schemas.Preferences{Tenant: "acme", Recipient: "u1", OptedOutTypes: []string{"b"}})
		r.sync(1)
		if p := r.table.Recipient("acme", "u1").Prefs; p == nil || strings.Join(p.OptedOutTypes, ",") != "b" {
			t.Fatalf("preferences %+v, want the newer (opted out of b)", p)
		}
		r.put(r.prefs, 1, key, nil)
		r.sync(1)
		if p := r.table.Recipient("acme", "u1").Prefs; p != nil {
			t.Fatalf("preferences %+v after a tombstone, want none", p)
		}
	})
	t.Run("an undecodable record is skipped and the records after it are applied", func(t *testing.T) {
		r := newTableRig(t)
		r.putRaw(r.devices, 0, schemas.DeviceKey("acme", "u1", "bad"), []byte("{not json"))
		r.putRaw(r.prefs, 0, schemas.RecipientKey("acme", "u1"), []byte("{not json"))
		r.put(r.devices, 0, schemas.DeviceKey("acme", "u1", "good"), device("acme", "u1", "good"))
		r.sync(0)
		who := r.table.Recipient("acme", "u1")
		if got := deviceIDs(who); got != "good" || who.Prefs != nil {
			t.Fatalf("devices %q prefs %+v, want only the device good", got, who.Prefs)
		}
	})
	t.Run("SyncAll waits for every partition of both topics", func(t *testing.T) {
		r := newTableRig(t)
		r.put(r.devices, 0, schemas.DeviceKey("acme", "u0", "d"), device("acme", "u0", "d"))
		r.put(r.devices, 1, schemas.DeviceKey("acme", "u1", "d"), device("acme", "u1", "d"))
		r.put(r.prefs, 1, schemas.RecipientKey("acme", "u1"), &schemas.Preferences{Tenant: "acme", Recipient: "u1"})
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second) // a guard
		defer cancel()
		if err := r.table.SyncAll(ctx); err != nil {
			t.Fatal(err)
		}
		r.table.mu.Lock()
		defer r.table.mu.Unlock()
		if r.table.next[r.devices][0] != 1 || r.table.next[r.devices][1] != 1 || r.table.next[r.prefs][1] != 1 {
			t.Fatalf("read positions %v after SyncAll, want every written record read", r.table.next)
		}
	})
}

func TestARouteTableSyncEndsWhenItCannotCatchUp(t *testing.T) {
	// A table that never reads: what Sync does when the table is behind.
	t.Run("a Sync behind a table that stopped fails with the table's error", func(t *testing.T) {
		r := newTableRigRunning(t, false)
		stopped := errors.New("route: table stopped")
		r.table.err = stopped
		r.put(r.devices, 0, schemas.DeviceKey("acme", "u1", "d"), device("acme", "u1", "d"))
		if err := r.table.Sync(testenv.Guarded(t), 0); !errors.Is(err, stopped) {
			t.Fatalf("Sync behind a stopped table: %v, want its error", err)
		}
	})
	t.Run("a table whose Run has returned holds the error a waiting Sync returns", func(t *testing.T) {
		// A Sync waiting when Run returns is woken and returns t.err (the
		// subtest above); one called later fails on the closed client.
		r := newTableRig(t)
		r.stop()
		r.table.mu.Lock()
		err := r.table.err
		r.table.mu.Unlock()
		if err == nil || err.Error() != "route: table stopped" {
			t.Fatalf("error of a stopped table: %v, want route: table stopped", err)
		}
	})
	t.Run("RunWith returns nil without running the stage when its context ends before the table is read", func(t *testing.T) {
		r := newTableRigRunning(t, false)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		ran := false
		if err := r.table.RunWith(ctx, func() { t.Error("synced called") }, func(context.Context) error { ran = true; return nil }); err != nil || ran {
			t.Fatalf("RunWith on an ended context: %v (stage ran: %v), want nil and no run", err, ran)
		}
	})
	t.Run("a Sync with nothing to read succeeds even on a stopped table", func(t *testing.T) {
		r := newTableRigRunning(t, false)
		r.table.err = errors.New("route: table stopped")
		if err := r.table.Sync(testenv.Guarded(t), 0); err != nil {
			t.Fatalf("Sync with nothing to read: %v", err)
		}
	})
	t.Run("a Sync behind ends when its context does", func(t *testing.T) {
		r := newTableRigRunning(t, false)
		r.put(r.devices, 1, schemas.DeviceKey("acme", "u1", "d"), device("acme", "u1", "d"))
		ctx, cancel := context.WithCancel(context.Background())
		go func() { time.Sleep(50 * time.Millisecond); cancel() }()
		if err := r.table.Sync(ctx, 1); !errors.Is(err, context.Canceled) {
			t.Fatalf("Sync cancelled while behind: %v, want context.Canceled", err)
		}
	})
	t.Run("a Sync of one partition does not wait for another", func(t *testing.T) {
		r := newTableRigRunning(t, false)
		r.put(r.devices, 1, schemas.DeviceKey("acme", "u1", "d"), device("acme", "u1", "d"))
		r.put(r.prefs, 1, schemas.RecipientKey("acme", "u1"), &schemas.Preferences{Tenant: "acme", Recipient: "u1"})
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second) // a guard
		defer cancel()
		if err := r.table.Sync(ctx, 0); err != nil {
			t.Fatalf("Sync of partition 0 with only partition 1 behind: %v", err)
		}
	})
	t.Run("a Sync waits until the table has read past what was written", func(t *testing.T) {
		r := newTableRigRunning(t, false)
		r.put(r.devices, 0, schemas.DeviceKey("acme", "u1", "d"), device("acme", "u1", "d"))
		r.put(r.devices, 0, schemas.DeviceKey("acme", "u1", "e"), device("acme", "u1", "e"))
		done := make(chan error, 1)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second) // a guard
		defer cancel()
		go func() { done <- r.table.Sync(ctx, 0) }()
		advance := func(next int64) {
			r.table.mu.Lock()
			r.table.next[r.devices][0] = next
			r.table.changed.Broadcast()
			r.table.mu.Unlock()
		}
		advance(1) // one of two records read: still behind
		select {
		case err := <-done:
			t.Fatalf("Sync returned (%v) with the table one record behind", err)
		case <-time.After(100 * time.Millisecond):
		}
		advance(2)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	})
}

// retries is a slog handler that hands on the failure count of RunWith's
// "trying again" warnings.
type retries struct{ n chan int64 }

func (h retries) Enabled(context.Context, slog.Level) bool { return true }
func (h retries) Handle(_ context.Context, r slog.Record) error {
	if strings.HasPrefix(r.Message, "route table: devices and preferences not read") {
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "failures" {
				select {
				case h.n <- a.Value.Int64():
				default: // the test reads only the first tries
				}
			}
			return true
		})
	}
	return nil
}
func (h retries) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h retries) WithGroup(string) slog.Handler      { return h }

// TestRunWithWaitsForItsTopicsThenRunsTheStage: a route stage or sink
// started before the devices and preferences topics exist (or while no
// broker answers) tries again after a backoff instead of exiting, and runs
// once they can be read. It used to return the listing's error at once:
// herald route exited 1 during an outage.
func TestRunWithWaitsForItsTopicsThenRunsTheStage(t *testing.T) {
	c := testenv.Kfake(t)
	brokers := c.ListenAddrs()
	devices, prefs := "route-devices-"+t.Name(), "route-prefs-"+t.Name()
	h := retries{n: make(chan int64, 16)}
	table, err := NewTable(devices, prefs, slog.New(h), append(embedded.ClientOpts(), kgo.SeedBrokers(brokers...))...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	synced, ran, done := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	go func() {
		done <- table.RunWith(ctx, func() { close(synced) }, func(ctx context.Context) error { close(ran); <-ctx.Done(); return nil })
	}()
	for want := int64(1); want <= 2; want++ { // two failed tries, counted, and still waiting
		select {
		case n := <-h.n:
			if n != want {
				t.Fatalf("try %d logged failures=%d", want, n)
			}
		case err := <-done:
			t.Fatalf("RunWith returned %v while its topics do not exist, want it to wait", err)
		case <-synced:
			t.Fatal("synced before the topics exist")
		case <-testenv.Guarded(t).Done():
			t.Fatal("no retry logged")
		}
	}
	adm := kadm.NewClient(testenv.Client(t, brokers))
	if _, err := adm.CreateTopics(testenv.Guarded(t), 2, 1, nil, devices, prefs); err != nil {
		t.Fatal(err)
	}
	testenv.Await(t, synced, "the table synced once its topics exist")
	testenv.Await(t, ran, "the stage run after the sync")
	cancel()
	if err := testenv.Await(t, done, "RunWith after cancel"); err != nil {
		t.Fatalf("RunWith: %v, want nil once its context ends", err)
	}
}
