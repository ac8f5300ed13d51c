package stage

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// countingRestore counts restored records.
type countingRestore struct{ n int }

func (c *countingRestore) Restore(*kgo.Record) error       { c.n++; return nil }
func (c *countingRestore) Process(*kgo.Record, *Out) error { return nil }
func (c *countingRestore) Tick(*Out)                       {}
func (c *countingRestore) Commit()                         {}
func (c *countingRestore) Abort()                          {}

// TestARestoreStillRunningLogsHowFarItIs: a restore that lasts longer
// than restoreLogEvery (here 0, every poll) logs a plain line with the
// records restored and the changelog offsets left, the progress of a long
// restore in the role's log.
func TestARestoreStillRunningLogsHowFarItIs(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.DefaultProduceTopic("changelog"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), readGuard)
	defer cancel()
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, 1, 1, nil, "changelog"); err != nil {
		t.Fatal(err)
	}
	for i := range 50 {
		if err := cl.ProduceSync(ctx, &kgo.Record{Key: []byte{byte(i)}, Value: []byte("v")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	prev := restoreLogEvery
	restoreLogEvery = 0
	defer func() { restoreLogEvery = prev }()
	var logs bytes.Buffer
	var task countingRestore
	res, err := restore(ctx, cl, []string{"changelog"}, 0, &task, slog.New(slog.NewTextHandler(&logs, nil)), nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.records != 50 || task.n != 50 {
		t.Fatalf("restored %d records (task saw %d), want 50", res.records, task.n)
	}
	first, _, _ := strings.Cut(logs.String(), "\n")
	if !strings.Contains(first, `msg="restoring partition" partition=0 records=0 offsets_left=50`) {
		t.Fatalf("first progress line %q, want the 50 offsets left before any record:\n%s", first, logs.String())
	}
}
