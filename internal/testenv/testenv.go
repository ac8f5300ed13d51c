// Package testenv finds the real components the full test suite runs
// against: the Apache Kafka broker started by `scripts/kafka/kafka start`
// (HERALD_TEST_KAFKA_BROKERS), and the other components listed in
// CONVENTIONS.md. A test that needs a component asks this package for it
// first: under `go test -short` the test is skipped, and in the full suite a
// missing or unreachable component fails the test loudly, saying how to start
// it. The package also gives tests isolated resources on those shared
// components (uniquely named topics, clients closed on cleanup).
package testenv

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
)

// skipShort skips t under -short: tests against real components run only in
// the full suite.
func skipShort(t testing.TB, component string) {
	t.Helper()
	if testing.Short() {
		t.Skipf("needs %s; runs in the full suite", component)
	}
}

// envList splits a comma-separated environment variable, dropping blanks.
func envList(name string) []string {
	var out []string
	for s := range strings.SplitSeq(os.Getenv(name), ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// uniqueName returns prefix, then t.Name() reduced to [a-zA-Z0-9-] and at
// most maxTest characters, then a random suffix: safe for Kafka topic names,
// transactional ids and group ids, and distinct across runs and -count=N.
func uniqueName(t testing.TB, prefix string, maxTest int) string {
	var b strings.Builder
	dash := false
	for _, r := range t.Name() {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9'
		switch {
		case ok:
			b.WriteRune(r)
			dash = false
		case !dash && b.Len() > 0:
			b.WriteByte('-')
			dash = true
		}
		if b.Len() >= maxTest {
			break
		}
	}
	name := strings.TrimRight(b.String(), "-")
	if len(name) > maxTest {
		name = name[:maxTest]
	}
	return fmt.Sprintf("%s%s-%08x", prefix, name, rand.Uint32())
}
