package main

import (
	"context"
	"errors"
	"io"
	"path/filepath"
	"strings"
	"testing"
)

func TestSinkAndEmulateCommandsRefuseWhatTheyCannotRun(t *testing.T) {
	missingCA := filepath.Join(t.TempDir(), "absent.pem")
	tests := []struct {
		name string
		run  func(args []string) error
		args []string
		env  map[string]string
		want string
	}{
		{"a sink needs a channel", sinkCmd, nil, nil, "--channel"},
		{"a channel without a sink is named", sinkCmd, []string{"--channel", "sms"}, nil, `"sms"`},
		{"the channel can come from the environment", sinkCmd, nil, map[string]string{"HERALD_CHANNEL": "carrier-pigeon"}, `"carrier-pigeon"`},
		{"a bad --reset-offsets is refused", sinkCmd, []string{"--channel", "apns", "--reset-offsets", "sideways"}, nil, "--reset-offsets"},
		{"an unreadable --apns-ca-file is named", sinkCmd, []string{"--channel", "apns", "--apns-ca-file", missingCA}, nil, "--apns-ca-file"},
		{"an empty --instance-id is refused", sinkCmd, []string{"--channel", "apns", "--instance-id", ""}, nil, "--instance-id"},
		{"emulate needs a provider", emulateCmd, nil, nil, "herald emulate apns"},
		{"emulate knows only its providers", emulateCmd, []string{"sms"}, nil, "herald emulate"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			err := tt.run(tt.args)
			if !errors.Is(err, errUsage) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v, want a usage error naming %s", err, tt.want)
			}
		})
	}
}

func sinkCmd(args []string) error    { return runSink(testContext(), args, io.Discard) }
func emulateCmd(args []string) error { return runEmulate(testContext(), args, io.Discard) }

// testContext is a context for commands that fail before they run.
func testContext() context.Context { return context.Background() }
