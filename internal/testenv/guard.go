package testenv

import (
	"context"
	"testing"
	"time"
)

// Guard bounds how long a test waits for something that a bug could make
// wait forever: a stage that makes no progress, a restore or a replay that
// never reaches its end, a Run that does not return when cancelled. It
// only turns a hang into a failure; no test asserts a duration. Under
// -short the tests run on kfake, where each wait takes well under two
// seconds: 20 s without progress is a hang, and failing then keeps a
// broken build (a mutant of scripts/mutation) from holding the fast suite
// until gremlins' timeout. On the real broker it is two minutes.
func Guard() time.Duration {
	if testing.Short() {
		return 20 * time.Second
	}
	return 2 * time.Minute
}

// Guarded is a test's context: it ends after Guard() under -short, after
// ten minutes otherwise (the real broker's tests run longer), and when the
// test ends.
func Guarded(t testing.TB) context.Context {
	limit := 10 * time.Minute
	if testing.Short() {
		limit = Guard()
	}
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	t.Cleanup(cancel)
	return ctx
}

// Await returns what done carries, failing t when nothing comes within
// Guard(): the wait for a goroutine (a stage's Run, a table's) that was
// told to stop.
func Await[T any](t testing.TB, done <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-done:
		return v
	case <-time.After(Guard()):
		t.Fatalf("%s did not end within %s", what, Guard())
		var zero T
		return zero
	}
}
