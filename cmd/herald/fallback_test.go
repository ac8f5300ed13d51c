package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestFallbackChainsAreCheckedByNameAtStart(t *testing.T) {
	cases := []struct {
		name, value, want string
	}{
		{"a chain of one step", "invoice.paid=push", "--fallback-chains invoice.paid: \"push\" has one step"},
		{"an unknown channel", "invoice.paid=push > sms", "--fallback-chains invoice.paid: step 2 \"sms\": unknown channel \"sms\""},
		{"a condition on the first step", "invoice.paid=push if failed > email", "the first step is the route stage's fan-out"},
	}
	for _, role := range []string{"route", "fallback"} {
		for _, c := range cases {
			t.Run(role+" refuses "+c.name, func(t *testing.T) {
				var out, errb bytes.Buffer
				if code := run(t.Context(), []string{role, "--brokers", "127.0.0.1:1", "--fallback-chains", c.value}, &out, &errb); code != 2 {
					t.Fatalf("exit %d, want 2: %s", code, errb.String())
				}
				if !strings.Contains(errb.String(), c.want) {
					t.Fatalf("stderr %q lacks %q", errb.String(), c.want)
				}
			})
		}
	}
	t.Run("a type with both a chain and a fallback channel is refused", func(t *testing.T) {
		var out, errb bytes.Buffer
		code := run(t.Context(), []string{"route", "--brokers", "127.0.0.1:1", "--fallback-channels", "invoice.paid=feed",
			"--fallback-chains", "invoice.paid=push > email if failed"}, &out, &errb)
		if code != 2 || !strings.Contains(errb.String(), "--fallback-chains invoice.paid: also has --fallback-channels") {
			t.Fatalf("exit %d: %s", code, errb.String())
		}
	})
}

func TestFallbackTakesMarkIntervalAndStillAcceptsTimerGrace(t *testing.T) {
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"--timer-grace of an earlier herald is still accepted (and ignored)",
			[]string{"--timer-grace", "5s", "--fallback-chains", "invoice.paid=push"}, "--fallback-chains invoice.paid: \"push\" has one step"},
		{"a --mark-interval that is not positive is refused",
			[]string{"--mark-interval", "0s"}, "mark-interval"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			if code := run(t.Context(), append([]string{"fallback", "--brokers", "127.0.0.1:1"}, c.args...), &out, &errb); code != 2 {
				t.Fatalf("exit %d, want 2: %s", code, errb.String())
			}
			if !strings.Contains(errb.String(), c.want) || strings.Contains(errb.String(), "not defined") {
				t.Fatalf("stderr %q lacks %q", errb.String(), c.want)
			}
		})
	}
}
