package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/internal/stage"
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

func TestProducerLingerReachesTheStageRuntime(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		env  string
		want time.Duration
	}{
		{"no flag is the runtime's default", nil, "", stage.DefaultProducerLinger},
		{"a duration is the linger", []string{"--producer-linger", "20ms"}, "", 20 * time.Millisecond},
		{"0 is no linger at all (the runtime's negative)", []string{"--producer-linger", "0"}, "", -1},
		{"the environment sets it too", nil, "15ms", 15 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.env != "" {
				t.Setenv("HERALD_PRODUCER_LINGER", tc.env)
			}
			fs := newFlagSet("dedupe")
			var sf stageFlags
			sf.register(fs, "dedupe", "herald-dedupe", "the seen-set", "replays")
			if err := parseFlags(fs, append([]string{"--instance-id", "d-0"}, tc.args...)); err != nil {
				t.Fatal(err)
			}
			if got := sf.runtime(nil, nil).Config("dedupe").ProducerLinger; got != tc.want {
				t.Fatalf("linger %v, want %v", got, tc.want)
			}
		})
	}
}

func TestAProducerLingerTheProducerCannotTakeIsRefused(t *testing.T) {
	for _, command := range []string{"dedupe", "route", "sink", "api"} {
		for _, d := range []string{"-1ms", "2m"} {
			t.Run(command+": --producer-linger "+d+" is refused naming the flag", func(t *testing.T) {
				args := []string{command, "--brokers", "127.0.0.1:1", "--producer-linger", d}
				if command == "sink" {
					args = append(args, "--channel", "webhook")
				}
				var out, errb bytes.Buffer
				code := run(t.Context(), args, &out, &errb)
				if code != 2 || !strings.Contains(errb.String(), "--producer-linger must be between 0 and 1m, got "+d) {
					t.Fatalf("exit %d, stderr %q; want 2 and a message naming --producer-linger", code, errb.String())
				}
			})
		}
	}
}

func TestMinTransactionIntervalReachesTheStageRuntime(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want time.Duration
	}{
		{"no flag is the roles' default, 10 ms", nil, DefaultMinTransactionInterval},
		{"a duration is the interval", []string{"--min-transaction-interval", "25ms"}, 25 * time.Millisecond},
		{"0 is none: a transaction per drained fetch", []string{"--min-transaction-interval", "0"}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := newFlagSet("dedupe")
			var sf stageFlags
			sf.register(fs, "dedupe", "herald-dedupe", "the seen-set", "replays")
			if err := parseFlags(fs, append([]string{"--instance-id", "d-0"}, tc.args...)); err != nil {
				t.Fatal(err)
			}
			if got := sf.runtime(nil, nil).Config("dedupe").MinTransactionInterval; got != tc.want {
				t.Fatalf("interval %v, want %v", got, tc.want)
			}
		})
	}
	for _, command := range []string{"dedupe", "route"} {
		for _, d := range []string{"-1ms", "11s"} {
			t.Run(command+": --min-transaction-interval "+d+" is refused naming the flag", func(t *testing.T) {
				var out, errb bytes.Buffer
				code := run(t.Context(), []string{command, "--brokers", "127.0.0.1:1", "--min-transaction-interval", d}, &out, &errb)
				if code != 2 || !strings.Contains(errb.String(), "--min-transaction-interval must be between 0 and 10s, got "+d) {
					t.Fatalf("exit %d, stderr %q; want 2 and a message naming --min-transaction-interval", code, errb.String())
				}
			})
		}
	}
}
