package sinks

import (
	"net/http"
	"testing"
	"time"
)

func TestRetryAfterIsReadAsSecondsOrADate(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	cases := []struct {
		name, v string
		want    time.Duration
	}{
		{"absent is zero", "", 0},
		{"seconds", "30", 30 * time.Second},
		{"an HTTP date", now.Add(time.Minute).Format(http.TimeFormat), time.Minute},
		{"a past date is zero", now.Add(-time.Minute).Format(http.TimeFormat), 0},
		{"garbage is zero", "soon", 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := ParseRetryAfter(tc.v, now); got != tc.want {
				t.Fatalf("ParseRetryAfter(%q) = %v, want %v", tc.v, got, tc.want)
			}
		})
	}
}
