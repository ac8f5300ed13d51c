package route

import (
	"testing"
	"time"

	"github.com/heraldhq/herald/schemas"
)

func utc(s string) int64 {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t.UnixMilli()
}

func TestQuietHoursAreJudgedOnTheLocalWallClockAcrossDST(t *testing.T) {
	cases := []struct {
		name      string
		at        string // UTC
		q         schemas.QuietHours
		wantIn    bool
		wantUntil string // UTC
	}{
		{"a night in Paris in winter ends at 07:00 CET",
			"2026-01-10T22:30:00Z", schemas.QuietHours{Start: "22:00", End: "07:00", TimeZone: "Europe/Paris"}, true, "2026-01-11T06:00:00Z"},
		{"the small hours of the same night end the same morning",
			"2026-01-11T02:00:00Z", schemas.QuietHours{Start: "22:00", End: "07:00", TimeZone: "Europe/Paris"}, true, "2026-01-11T06:00:00Z"},
		{"the evening before the window is outside it",
			"2026-01-10T20:59:00Z", schemas.QuietHours{Start: "22:00", End: "07:00", TimeZone: "Europe/Paris"}, false, ""},
		{"the end minute itself is outside the window",
			"2026-01-11T06:00:00Z", schemas.QuietHours{Start: "22:00", End: "07:00", TimeZone: "Europe/Paris"}, false, ""},
		{"a night that springs forward in New York ends at 07:00 EDT",
			"2026-03-08T04:00:00Z", schemas.QuietHours{Start: "22:00", End: "07:00", TimeZone: "America/New_York"}, true, "2026-03-08T11:00:00Z"},
		{"a night that falls back in Paris ends at 07:00 CET, ten real hours later",
			"2026-10-24T20:00:00Z", schemas.QuietHours{Start: "22:00", End: "07:00", TimeZone: "Europe/Paris"}, true, "2026-10-25T06:00:00Z"},
		{"an end inside the spring-forward gap ends the window at the transition",
			"2026-03-29T00:30:00Z", schemas.QuietHours{Start: "01:00", End: "02:30", TimeZone: "Europe/Paris"}, true, "2026-03-29T01:00:00Z"},
		{"an end that happens twice ends the window at its first occurrence",
			"2026-10-24T22:30:00Z", schemas.QuietHours{Start: "00:00", End: "02:30", TimeZone: "Europe/Paris"}, true, "2026-10-25T00:30:00Z"},
		{"in the repeated hour the window ends at the next occurrence",
			"2026-10-25T01:10:00Z", schemas.QuietHours{Start: "00:00", End: "02:30", TimeZone: "Europe/Paris"}, true, "2026-10-25T01:30:00Z"},
		{"a half-hour zone is honoured",
			"2026-06-01T13:00:00Z", schemas.QuietHours{Start: "22:00", End: "06:00", TimeZone: "Asia/Kolkata"}, false, ""},
		{"a daytime window does not span midnight",
			"2026-06-01T13:15:00Z", schemas.QuietHours{Start: "13:00", End: "14:00", TimeZone: "UTC"}, true, "2026-06-01T14:00:00Z"},
		{"an unknown zone is read as UTC",
			"2026-06-01T13:15:00Z", schemas.QuietHours{Start: "13:00", End: "14:00", TimeZone: "Mars/Olympus"}, true, "2026-06-01T14:00:00Z"},
		{"an empty window never defers",
			"2026-06-01T13:15:00Z", schemas.QuietHours{Start: "13:00", End: "13:00", TimeZone: "UTC"}, false, ""},
		{"a malformed time never defers",
			"2026-06-01T13:15:00Z", schemas.QuietHours{Start: "1pm", End: "14:00", TimeZone: "UTC"}, false, ""},
		{"a daytime window starts exactly at its start minute",
			"2026-06-01T13:00:00Z", schemas.QuietHours{Start: "13:00", End: "14:00", TimeZone: "UTC"}, true, "2026-06-01T14:00:00Z"},
		{"a daytime window has ended exactly at its end minute",
			"2026-06-01T14:00:00Z", schemas.QuietHours{Start: "13:00", End: "14:00", TimeZone: "UTC"}, false, ""},
		{"the last minute of a daytime window is inside it",
			"2026-06-01T13:59:59Z", schemas.QuietHours{Start: "13:00", End: "14:00", TimeZone: "UTC"}, true, "2026-06-01T14:00:00Z"},
		{"a window may start at 23:00 and end at 23:59",
			"2026-06-01T23:30:00Z", schemas.QuietHours{Start: "23:00", End: "23:59", TimeZone: "UTC"}, true, "2026-06-01T23:59:00Z"},
		{"an hour past 23 is malformed and never defers",
			"2026-06-01T13:30:00Z", schemas.QuietHours{Start: "13:00", End: "24:00", TimeZone: "UTC"}, false, ""},
		{"a minute past 59 is malformed and never defers",
			"2026-06-01T13:30:00Z", schemas.QuietHours{Start: "13:00", End: "13:60", TimeZone: "UTC"}, false, ""},
		{"a night in New York ending before the clocks spring forward ends at that wall time in EDT",
			"2026-03-08T06:00:00Z", schemas.QuietHours{Start: "22:00", End: "05:00", TimeZone: "America/New_York"}, true, "2026-03-08T09:00:00Z"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			until, in := QuietUntil(utc(c.at), c.q)
			if in != c.wantIn {
				t.Fatalf("in quiet hours = %v, want %v", in, c.wantIn)
			}
			if in && until != utc(c.wantUntil) {
				t.Fatalf("until %s, want %s", fmtTime(until), c.wantUntil)
			}
		})
	}
}

func TestOnlyZonesThatLoadAreCached(t *testing.T) {
	cases := []struct {
		name   string
		zone   string
		want   *time.Location // nil: the zone of that name
		cached bool
	}{
		{"an IANA zone is loaded and cached", "Pacific/Chatham", nil, true},
		{"UTC is cached", "UTC", time.UTC, true},
		{"an unknown zone is read as UTC and not cached", "Mars/Olympus", time.UTC, false},
		{"a misspelt zone is read as UTC and not cached", "Asia/Tokio", time.UTC, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			zones.Delete(c.zone)
			t.Cleanup(func() { zones.Delete(c.zone) })
			for range 2 { // the second read goes through the cache, if any
				got := zone(c.zone)
				if c.want != nil && got != c.want {
					t.Fatalf("zone(%q) = %v, want %v", c.zone, got, c.want)
				}
				if c.want == nil && got.String() != c.zone {
					t.Fatalf("zone(%q) = %v", c.zone, got)
				}
			}
			if _, ok := zones.Load(c.zone); ok != c.cached {
				t.Fatalf("zone %q cached = %v, want %v", c.zone, ok, c.cached)
			}
		})
	}
}
