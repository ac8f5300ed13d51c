package route

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/internal/metrics"
	"github.com/heraldhq/herald/internal/stage"
)

func TestRouteOptionsFillOnlyWhatIsUnset(t *testing.T) {
	logger := slog.New(slog.DiscardHandler)
	reg := metrics.NewRegistry()
	tests := []struct {
		name string
		in   Options
		want func(Options) bool
	}{
		{"an empty options value gets the default group, logger, registry and a 1 s grace", Options{},
			func(o Options) bool {
				return o.Group == "herald-route" && o.Logger == slog.Default() && o.Metrics == metrics.Default && o.TimerGrace == time.Second
			}},
		{"what is set is kept", Options{Instance: stage.Instance{Group: "g", Logger: logger, Metrics: reg}, TimerGrace: time.Millisecond},
			func(o Options) bool {
				return o.Group == "g" && o.Logger == logger && o.Metrics == reg && o.TimerGrace == time.Millisecond
			}},
		{"a negative grace is the default", Options{TimerGrace: -time.Second},
			func(o Options) bool { return o.TimerGrace == time.Second }},
		{"a zero grace is the default", Options{TimerGrace: 0},
			func(o Options) bool { return o.TimerGrace == time.Second }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.in.withDefaults(); !tt.want(got) {
				t.Fatalf("withDefaults() = group %q logger %p metrics %p grace %v", got.Group, got.Logger, got.Metrics, got.TimerGrace)
			}
		})
	}
}

func TestTimersFireOnTheWallClockLessTheGrace(t *testing.T) {
	wall := time.UnixMilli(1_700_000_000_000)
	clock := timerClock(1500*time.Millisecond, func() time.Time { return wall })
	if got, want := clock(), wall.UnixMilli()-1500; got != want {
		t.Fatalf("timer clock %d, want the wall clock less 1.5 s (%d)", got, want)
	}
	wall = wall.Add(time.Second)
	if got, want := clock(), wall.UnixMilli()-1500; got != want {
		t.Fatalf("timer clock %d after a second, want %d: it reads the wall clock on each call", got, want)
	}
}

func TestARouteStageWithoutCatalogOrInstanceIDIsRefused(t *testing.T) {
	err := Run(context.Background(), Options{})
	if err == nil || !strings.Contains(err.Error(), "Catalog and InstanceID are required") {
		t.Fatalf("Run without a catalog: %v, want the missing settings named", err)
	}
}
