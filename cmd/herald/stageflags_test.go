package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestStageCommandsTakeOnlyAnExplicitOffsetReset(t *testing.T) {
	tests := []struct {
		name string
		args []string
		env  string
	}{
		{"a --reset-offsets other than earliest or latest is refused", []string{"--reset-offsets", "sideways"}, ""},
		{"HERALD_RESET_OFFSETS is read and checked the same way", nil, "sideways"},
	}
	for _, command := range []string{"dedupe", "route"} {
		for _, tc := range tests {
			t.Run(command+": "+tc.name, func(t *testing.T) {
				if tc.env != "" {
					t.Setenv("HERALD_RESET_OFFSETS", tc.env)
				}
				var out, errb bytes.Buffer
				code := run(t.Context(), append([]string{command, "--brokers", "127.0.0.1:1"}, tc.args...), &out, &errb)
				if code != 2 || !strings.Contains(errb.String(), "--reset-offsets must be earliest, latest or empty") {
					t.Fatalf("exit %d, stderr %q; want 2 and a message naming --reset-offsets", code, errb.String())
				}
			})
		}
	}
}

func TestStageCommandsRestoreAtLeastOnePartitionAtATime(t *testing.T) {
	for _, command := range []string{"dedupe", "route"} {
		for _, n := range []string{"0", "-3"} {
			t.Run(command+": --restore-parallelism "+n+" is refused", func(t *testing.T) {
				var out, errb bytes.Buffer
				code := run(t.Context(), []string{command, "--brokers", "127.0.0.1:1", "--restore-parallelism", n}, &out, &errb)
				if code != 2 || !strings.Contains(errb.String(), "--restore-parallelism must be at least 1, got "+n) {
					t.Fatalf("exit %d, stderr %q; want 2 and a message naming --restore-parallelism", code, errb.String())
				}
			})
		}
	}
	t.Run("the flag reaches the stage runtime", func(t *testing.T) {
		fs := newFlagSet("dedupe")
		var sf stageFlags
		sf.register(fs, "dedupe", "herald-dedupe", "the seen-set", "replays")
		if err := parseFlags(fs, []string{"--instance-id", "d-0", "--restore-parallelism", "12"}); err != nil {
			t.Fatal(err)
		}
		if got := sf.runtime(nil, nil).Config("dedupe").RestoreParallelism; got != 12 {
			t.Fatalf("RestoreParallelism %d, want 12", got)
		}
	})
}
