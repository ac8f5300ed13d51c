package stage

import (
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldhq/herald/internal/metrics"
)

// These tests check the runner's configuration and bookkeeping without a
// broker: what New makes of a Config, and what a revocation drops.

func minimalConfig() Config {
	return Config{Name: "s", Brokers: []string{"127.0.0.1:1"}, Group: "g", TransactionalID: "tx", Input: "in",
		NewTask: func(int32) Task { return nil },
		Logger:  slog.New(slog.NewTextHandler(io.Discard, nil)),
		Metrics: metrics.NewRegistry(),
	}
}

func TestAConfigsUnsetBoundsTakeTheirDefaultsAndSetOnesAreKept(t *testing.T) {
	t.Run("zero values take the defaults", func(t *testing.T) {
		c := minimalConfig()
		if err := c.defaults(); err != nil {
			t.Fatal(err)
		}
		got := []any{c.MaxBatchRecords, c.BatchInterval, c.TransactionTimeout, c.SessionTimeout, c.RebalanceTimeout, c.RestoreParallelism}
		want := []any{2000, 100 * time.Millisecond, 10 * time.Second, 10 * time.Second, time.Minute, 4}
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("defaults %v, want %v", got, want)
			}
		}
	})
	t.Run("negative values take the defaults too", func(t *testing.T) {
		c := minimalConfig()
		c.MaxBatchRecords, c.BatchInterval, c.TransactionTimeout, c.SessionTimeout, c.RebalanceTimeout, c.RestoreParallelism = -1, -1, -1, -1, -1, -1
		if err := c.defaults(); err != nil {
			t.Fatal(err)
		}
		if c.MaxBatchRecords != 2000 || c.BatchInterval != 100*time.Millisecond || c.TransactionTimeout != 10*time.Second ||
			c.SessionTimeout != 10*time.Second || c.RebalanceTimeout != time.Minute || c.RestoreParallelism != 4 {
			t.Fatalf("negative bounds kept: %+v", c)
		}
	})
	t.Run("set values are kept", func(t *testing.T) {
		c := minimalConfig()
		c.MaxBatchRecords, c.BatchInterval, c.TransactionTimeout, c.SessionTimeout, c.RebalanceTimeout, c.RestoreParallelism =
			1, time.Millisecond, time.Second, 2*time.Second, 3*time.Second, 1
		if err := c.defaults(); err != nil {
			t.Fatal(err)
		}
		if c.MaxBatchRecords != 1 || c.BatchInterval != time.Millisecond || c.TransactionTimeout != time.Second ||
			c.SessionTimeout != 2*time.Second || c.RebalanceTimeout != 3*time.Second || c.RestoreParallelism != 1 {
			t.Fatalf("set bounds replaced: %+v", c)
		}
	})
	t.Run("a missing required field is refused", func(t *testing.T) {
		for name, unset := range map[string]func(*Config){
			"Name": func(c *Config) { c.Name = "" }, "Brokers": func(c *Config) { c.Brokers = nil },
			"Group": func(c *Config) { c.Group = "" }, "TransactionalID": func(c *Config) { c.TransactionalID = "" },
			"Input": func(c *Config) { c.Input = "" }, "NewTask": func(c *Config) { c.NewTask = nil },
		} {
			c := minimalConfig()
			unset(&c)
			if err := c.defaults(); err == nil {
				t.Fatalf("a config without %s accepted", name)
			}
		}
	})
	t.Run("an unknown reset is refused", func(t *testing.T) {
		c := minimalConfig()
		c.ResetOffsets = "newest"
		if err := c.defaults(); err == nil || !strings.Contains(err.Error(), "newest") {
			t.Fatalf("ResetOffsets newest: %v, want a refusal naming it", err)
		}
	})
}

// clientOf builds (without connecting) a client of the runner's options.
func clientOf(t *testing.T, r *Runner) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(r.opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

func TestAStageIsAStaticGroupMemberOnlyWhenGivenAnInstanceID(t *testing.T) {
	for _, id := range []string{"", "dedupe-0"} {
		c := minimalConfig()
		c.GroupInstanceID = id
		r, err := New(c)
		if err != nil {
			t.Fatal(err)
		}
		vs := clientOf(t, r).OptValues(kgo.InstanceID) // the id, and whether one is set
		if len(vs) != 2 || vs[0] != id || vs[1] != (id != "") {
			t.Fatalf("instance id option %v for GroupInstanceID %q, want [%s %v]", vs, id, id, id != "")
		}
	}
}

func TestAStageWithoutAnExplicitResetStartsAPartitionAtItsBeginning(t *testing.T) {
	for reset, want := range map[string]int64{"": -2, ResetEarliest: -2, ResetLatest: -1} {
		c := minimalConfig()
		c.ResetOffsets = reset
		r, err := New(c)
		if err != nil {
			t.Fatal(err)
		}
		off, _ := clientOf(t, r).OptValue(kgo.ConsumeResetOffset).(kgo.Offset)
		if got := off.EpochOffset().Offset; got != want {
			t.Fatalf("reset %q starts at %d, want %d (-2 the start, -1 the end)", reset, got, want)
		}
	}
}

func TestARevocationDropsTheStateOfTheRevokedPartitionsOnly(t *testing.T) {
	r, err := New(minimalConfig())
	if err != nil {
		t.Fatal(err)
	}
	r.tasks = map[int32]Task{0: nil, 1: nil, 2: nil}
	r.isolate = map[int32]int64{0: 5, 1: 7}
	r.poison = map[position]string{{0, 3}: "x", {1, 4}: "y", {1, 6}: "z"}
	r.revoked(nil, nil, map[string][]int32{"in": {1, 2}, "other": {0}})
	if _, ok := r.tasks[0]; !ok || len(r.tasks) != 1 {
		t.Fatalf("tasks %v after revoking 1 and 2, want partition 0's only", r.tasks)
	}
	if len(r.isolate) != 1 || r.isolate[0] != 5 {
		t.Fatalf("isolation %v, want partition 0's only", r.isolate)
	}
	if len(r.poison) != 1 || r.poison[position{0, 3}] != "x" {
		t.Fatalf("poisoned records %v, want partition 0's only", r.poison)
	}
	if got := r.partitions.Value(); got != 1 {
		t.Fatalf("partitions gauge %d, want 1", got)
	}
}

func TestACommitMarkerIsToldFromAnAbortMarker(t *testing.T) {
	cases := []struct {
		name string
		key  []byte
		want bool
	}{
		{"a commit marker (version 0, type 1)", []byte{0, 0, 0, 1}, true},
		{"an abort marker (version 0, type 0)", []byte{0, 0, 0, 0}, false},
		{"a key too short to be a marker", []byte{0, 1}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := isCommitMarker(&kgo.Record{Key: c.key}); got != c.want {
				t.Fatalf("isCommitMarker(%v) = %v, want %v", c.key, got, c.want)
			}
		})
	}
}
