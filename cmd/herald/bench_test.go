package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/heraldhq/herald/internal/testenv"
)

func TestBenchOnTheRealBrokerPrintsARowPerRunAndItsProfile(t *testing.T) {
	// Two rounds: each row is the median of the two, said in its note.
	brokers := testenv.Kafka(t)
	prof := filepath.Join(t.TempDir(), "cpu.prof")
	var out, errOut bytes.Buffer
	code := run(context.Background(), []string{"bench", "--brokers", strings.Join(brokers, ","), "--requests", "2000", "--txn-records", "500",
		"--compression", "none,lz4", "--instances", "1,2", "--partitions", "2", "--ceiling", "--cpuprofile", prof, "--rounds", "2"}, &out, &errOut)
	if code != 0 {
		t.Fatalf("herald bench exited %d: %s", code, errOut.String())
	}
	for _, want := range []string{"txn ≤ 500, none", "txn ≤ 500, lz4", "2 instances in one process", "produce the stream (setup)"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the table lacks %q:\n%s", want, out.String())
		}
	}
	if n := strings.Count(out.String(), "dedupe stage, exactly-once"); n != 4 {
		t.Errorf("%d stage rows, want 4 (2 codecs × 2 instance counts):\n%s", n, out.String())
	}
	if n := strings.Count(out.String(), "exactly-once copy loop (ceiling), txn ≤ 500"); n != 2 {
		t.Errorf("%d copy loop rows, want 2 (--ceiling: one per codec):\n%s", n, out.String())
	}
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		if strings.HasPrefix(line, "herald/") && !strings.Contains(line, "median of 2 rounds, ") {
			t.Errorf("a row is not the median of the two rounds: %s", line)
		}
	}
	b, err := os.ReadFile(prof)
	if err != nil || !bytes.HasPrefix(b, []byte{0x1f, 0x8b}) {
		t.Fatalf("the CPU profile (%d bytes, %v) is not a gzipped profile", len(b), err)
	}
}

func TestBenchRefusesAStreamStepThatPutsRepeatsPastTheWindowsBeforeMeasuring(t *testing.T) {
	var out, errOut bytes.Buffer
	// No broker listens on port 1: the check comes first.
	code := run(context.Background(), []string{"bench", "--brokers", "127.0.0.1:1", "--requests", "1000", "--stream-step", "1h"}, &out, &errOut)
	if code == 0 || !strings.Contains(errOut.String(), "not within the dedupe window (1h0m0s) and the idempotency TTL (24h0m0s)") {
		t.Fatalf("exit %d, stderr %q; want the repeats' lag against the windows", code, errOut.String())
	}
}

func TestBenchRefusesAnUnknownCodecAndABadInstanceCount(t *testing.T) {
	for _, tc := range []struct{ name, flag, value, want string }{
		{"an unknown codec is named with the choices", "--compression", "lz5", `--compression: compression "lz5" is not one of none, gzip, snappy, lz4, zstd`},
		{"a zero instance count is refused", "--instances", "0", `--instances: "0" is not a positive integer`},
		{"a negative segment size is refused", "--segment-bytes", "-1", "--segment-bytes must be at least 0, got -1"},
		{"zero rounds are refused", "--rounds", "0", "--rounds must be at least 1, got 0"},
		{"a negative stream step is refused", "--stream-step", "-1s", "--stream-step must not be negative"},
		{"a zero idempotency TTL is refused", "--idempotency-ttl", "0s", "--idempotency-ttl must be at least 1ms"},
		{"a repeat ratio of 1 is refused by name", "--repeat-ratio", "1", "--repeat-ratio must be in [0, 1), got 1"},
		{"zero requests are refused by name", "--requests", "0", "--requests must be at least 1, got 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			code := run(context.Background(), []string{"bench", "--brokers", "127.0.0.1:1", tc.flag, tc.value}, &out, &errOut)
			if code != 2 || !strings.Contains(errOut.String(), tc.want) {
				t.Fatalf("exit %d, stderr %q; want 2 and %q", code, errOut.String(), tc.want)
			}
		})
	}
}
