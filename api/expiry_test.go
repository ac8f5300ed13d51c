package api

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/heraldhq/herald/sdk"
)

// TestExplainSeesADedupeWindowEndOnItsLastMillisecond: explain answers from
// the seen-set replica, which keeps an expired entry until the dedupe stage
// tombstones it (only once the partition's stream time passes its expiry),
// so explain must itself treat an entry as gone from the millisecond its
// window ends, as the stage does.
func TestExplainSeesADedupeWindowEndOnItsLastMillisecond(t *testing.T) {
	t0 := time.Now().Truncate(time.Millisecond)
	var clock atomic.Int64
	clock.Store(t0.UnixMilli())
	p := startPipeline(t, func(c *Config) { c.Now = func() time.Time { return time.UnixMilli(clock.Load()) } })
	body := `{"type":"expiry","recipientId":"w1","title":"t","body":"b","dedupeKey":"exp-1","dedupeWindowMs":60000}`
	if a := p.call(t, "POST", "/v1/notifications", keyA, body); a.status != 202 {
		t.Fatalf("send: %d %s", a.status, a.body)
	}
	explainAt := func(ms int64) sdk.Explanation {
		clock.Store(t0.UnixMilli() + ms)
		return decode[sdk.Explanation](t, p.call(t, "POST", "/v1/explain", keyA, body))
	}
	p.eventually(t, "explain sees the send", func() bool { return explainAt(1).WouldDeduplicate })
	for _, c := range []struct {
		name string
		ms   int64
		want bool
	}{
		{"on the window's last millisecond it would deduplicate", 59_999, true},
		{"at the window's end it would not", 60_000, false},
		{"after the window's end it would not", 60_001, false},
		{"explaining changed nothing: before the end it still would", 59_998, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			ex := explainAt(c.ms)
			if ex.WouldDeduplicate != c.want || len(ex.Notifications) != 1 {
				t.Fatalf("%d ms after the send: %+v, want wouldDeduplicate %v", c.ms, ex, c.want)
			}
			if c.want && ex.Notifications[0].OriginalAt != t0.UnixMilli() {
				t.Fatalf("original at %d, want the send's time %d", ex.Notifications[0].OriginalAt, t0.UnixMilli())
			}
		})
	}
}
