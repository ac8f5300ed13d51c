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
