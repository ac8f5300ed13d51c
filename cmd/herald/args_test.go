package main

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestEveryCommandRefusesAStrayWord: Go's flag package stops at the first
// word that is not a flag and leaves every flag after it unread, so a
// stray word (herald dedupe help, a value whose flag was mistyped) would
// run the command without the flags that follow. Every command that takes
// flags only refuses it, naming it, before it starts anything.
func TestEveryCommandRefusesAStrayWord(t *testing.T) {
	for _, p := range commandPaths() {
		if p == "probe" || p == "config check" { // they take words: see their own tests
			continue
		}
		t.Run("herald "+p+" refuses a stray word before its flags", func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second) // stops a command that started anyway
			defer cancel()
			args := append(strings.Fields(p), "stray", "--config", filepath.Join(t.TempDir(), "absent.yaml"))
			code, stderr := runCapturing(t, ctx, args)
			if code != 2 || !strings.Contains(stderr, `unexpected argument "stray"`) {
				t.Fatalf("herald %s exits %d, want 2 naming the stray word:\n%s", strings.Join(args, " "), code, stderr)
			}
		})
	}
}

func TestABadFlagIsReportedOnceWithAPointerToTheHelp(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"an unknown flag", []string{"sink", "--chanel", "apns"}, "flag provided but not defined: -chanel"},
		{"a flag without its value", []string{"dedupe", "--brokers"}, "flag needs an argument: -brokers"},
		{"a value that does not parse", []string{"dedupe", "--dedupe-window", "abc"}, `invalid value "abc" for flag -dedupe-window`},
		{"an unknown flag of config check", []string{"config", "check", "--nope"}, "flag provided but not defined: -nope"},
	} {
		t.Run(tc.name+" is reported once, without the whole help", func(t *testing.T) {
			code, stderr := runCapturing(t, t.Context(), tc.args)
			if code != 2 || strings.Count(stderr, tc.want) != 1 || !strings.Contains(stderr, "-h' for its flags") {
				t.Fatalf("exit %d, want 2 with %q once and a pointer to -h:\n%s", code, tc.want, stderr)
			}
			if strings.Contains(stderr, "Flags (") {
				t.Fatalf("the whole help was printed:\n%s", stderr)
			}
		})
	}
}

// TestProbeReadsItsFlagsOnEitherSideOfTheURL: herald probe URL --timeout D
// (flags after the URL) applies --timeout; it used to be refused.
func TestProbeReadsItsFlagsOnEitherSideOfTheURL(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(200 * time.Millisecond)
		w.Write([]byte("ok"))
	}))
	defer srv.Close()
	for _, tc := range []struct {
		name string
		args []string
		want int
	}{
		{"a URL alone answers 200: exit 0", []string{"probe", srv.URL}, 0},
		{"a timeout after the URL applies: exit 1", []string{"probe", srv.URL, "--timeout", "10ms"}, 1},
		{"a timeout before the URL applies: exit 1", []string{"probe", "--timeout", "10ms", srv.URL}, 1},
		{"no URL is a usage error", []string{"probe", "--timeout", "10ms"}, 2},
		{"two URLs are a usage error", []string{"probe", srv.URL, srv.URL}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if code, stderr := runCapturing(t, t.Context(), tc.args); code != tc.want {
				t.Fatalf("herald %s exits %d, want %d: %s", strings.Join(tc.args, " "), code, tc.want, stderr)
			}
		})
	}
}

// TestAuditTimelineRefusesWhatItWouldIgnore: a flag that does not apply
// to the question asked, or an id that cannot be one, is a usage error
// before ClickHouse is asked (it used to be ignored, and the answer was
// "nothing found").
func TestAuditTimelineRefusesWhatItWouldIgnore(t *testing.T) {
	const id = "52f364d9288c640b306b566e509104bd"
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"an id that is not 32 lower-case hex characters", []string{"--id", "6f1c2b0e-9c57-5d0a-8e7e-1a2b3c4d5e6f"}, "is not a notification id"},
		{"--since with --id", []string{"--id", id, "--since", "72h"}, "--since and --until apply only with --recipient"},
		{"--until with --dedupe-key", []string{"--dedupe-key", "k", "--until", "1h"}, "--since and --until apply only with --recipient"},
		{"--type with --id", []string{"--id", id, "--type", "invoice.paid"}, "--type applies only with --dedupe-key"},
		{"--until before --since", []string{"--recipient", "u", "--since", "1h", "--until", "2h"}, "must be after --since"},
		{"two questions at once", []string{"--id", id, "--recipient", "u"}, "exactly one of --id, --recipient or --dedupe-key"},
		{"--same-content-window with --id", []string{"--id", id, "--same-content-window", "1h"}, "--same-content-window applies only with --recipient"},
		{"a negative --same-content-window", []string{"--recipient", "u", "--since", "1h", "--same-content-window", "-1h"}, "--same-content-window must not be negative"},
	} {
		t.Run(tc.name+" is refused", func(t *testing.T) {
			args := append([]string{"audit", "timeline", "--clickhouse-addr", "127.0.0.1:1"}, tc.args...)
			code, stderr := runCapturing(t, t.Context(), args)
			if code != 2 || !strings.Contains(stderr, tc.want) {
				t.Fatalf("exit %d, want 2 with %q:\n%s", code, tc.want, stderr)
			}
		})
	}
}

// TestEmulatorsRefuseFaultsTheyCannotInject: rates outside [0, 1] and
// negative delays used to start an emulator that injected something else;
// the webhook receiver without a secret answered 401 to every message.
func TestEmulatorsRefuseFaultsTheyCannotInject(t *testing.T) {
	for _, em := range []string{"apns", "fcm", "webhook", "webpush"} {
		t.Run("herald emulate "+em+" names every bad fault setting", func(t *testing.T) {
			args := []string{"emulate", em, "--addr", "127.0.0.1:0", "--reset-rate", "5", "--slow-rate", "-1", "--latency", "-1s", "--slow-delay", "0s", "--secret", "whsec_x"}
			if em != "webhook" {
				args = args[:len(args)-2]
			}
			code, stderr := runCapturing(t, t.Context(), args)
			for _, want := range []string{"4 bad settings", "--reset-rate must be in [0, 1], got 5", "--slow-rate must be in [0, 1], got -1",
				"--latency must not be negative", "--slow-delay must be positive"} {
				if code != 2 || !strings.Contains(stderr, want) {
					t.Errorf("exit %d, want 2 with %q:\n%s", code, want, stderr)
				}
			}
		})
	}
	t.Run("herald emulate webhook without --secret is refused", func(t *testing.T) {
		t.Setenv("HERALD_SECRET", "")
		code, stderr := runCapturing(t, t.Context(), []string{"emulate", "webhook", "--addr", "127.0.0.1:0"})
		if code != 2 || !strings.Contains(stderr, "--secret is required") {
			t.Fatalf("exit %d, want 2 naming --secret:\n%s", code, stderr)
		}
	})
}

// TestASinkWhoseProviderRefusesItsSettingsIsAUsageError: a certificate,
// key file or channel that cannot work is a usage error (exit 2) naming
// the flags, before any broker is dialled; it was a runtime error (exit 1)
// that named the adapter's settings.
func TestASinkWhoseProviderRefusesItsSettingsIsAUsageError(t *testing.T) {
	notACert := filepath.Join(t.TempDir(), "not-a-cert.pem")
	notAKey := filepath.Join(t.TempDir(), "not-a-key.json")
	for _, f := range []string{notACert, notAKey} {
		if err := os.WriteFile(f, []byte("{}"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"an APNs certificate file without a certificate", []string{"--channel", "apns", "--apns-cert-file", notACert}, "(check --apns-key-file, --apns-key-id, --apns-team-id, --apns-topic or --apns-cert-file)"},
		{"an FCM key file that is no service account key", []string{"--channel", "fcm", "--fcm-credentials-file", notAKey}, "(check --fcm-credentials-file or --fcm-project)"},
		{"a channel herald has no sink for", []string{"--channel", "sms"}, `--channel "sms" has no sink`},
	} {
		t.Run(tc.name+" is a usage error naming the flags", func(t *testing.T) {
			code, stderr := runCapturing(t, t.Context(), append([]string{"sink", "--brokers", "127.0.0.1:1"}, tc.args...))
			if code != 2 || !strings.Contains(stderr, tc.want) {
				t.Fatalf("exit %d, want 2 with %q:\n%s", code, tc.want, stderr)
			}
		})
	}
}

func TestTheLogLevelIsReadOrRefused(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want slog.Level
		ok   bool
	}{
		{"", slog.LevelInfo, true},
		{"debug", slog.LevelDebug, true},
		{"WARN", slog.LevelWarn, true},
		{"error+2", slog.LevelError + 2, true},
		{"verbose", 0, false},
		{"3", 0, false},
	} {
		name := "HERALD_LOG_LEVEL=" + tc.in + " is refused"
		if tc.ok {
			name = "HERALD_LOG_LEVEL=" + tc.in + " is " + tc.want.String()
		}
		t.Run(name, func(t *testing.T) {
			got, err := logLevel(tc.in)
			if (err == nil) != tc.ok || got != tc.want {
				t.Fatalf("logLevel(%q) = %v, %v", tc.in, got, err)
			}
			if err != nil && !strings.Contains(err.Error(), "HERALD_LOG_LEVEL") {
				t.Fatalf("the error does not name the variable: %v", err)
			}
		})
	}
}

// TestAnIntegerFlagIsReadInBase10Only: the flag package reads "010" as 8;
// --partitions 010 would have made eight partitions, which cannot be
// undone. A base prefix or a leading zero is refused, in every syntax.
func TestAnIntegerFlagIsReadInBase10Only(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		env  string
		want string
	}{
		{"--partitions 010 is refused", []string{"--partitions", "010"}, "", `--partitions = "010" is not a decimal integer`},
		{"--partitions=0x10 is refused", []string{"--partitions=0x10"}, "", `--partitions = "0x10" is not a decimal integer`},
		{"-replication 0b11 is refused", []string{"-replication", "0b11"}, "", `--replication = "0b11" is not a decimal integer`},
		{"HERALD_PARTITIONS=0o7 is refused", nil, "0o7", `= "0o7" is not a decimal integer`},
		{"--partitions after a boolean flag is read as its value", []string{"--fix-configs", "--partitions", "0"}, "", "--partitions must be at least 1, got 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("HERALD_PARTITIONS", tc.env)
			if tc.env == "" {
				os.Unsetenv("HERALD_PARTITIONS")
			}
			args := append([]string{"topics", "create", "--brokers", "127.0.0.1:1"}, tc.args...)
			code, stderr := runCapturing(t, t.Context(), args)
			if code != 2 || !strings.Contains(stderr, tc.want) {
				t.Fatalf("exit %d, want 2 with %q:\n%s", code, tc.want, stderr)
			}
		})
	}
}

// TestClickHouseServerNamesEveryBadFlag: its settings were checked by the
// library, one at a time, naming ServeOptions' fields (TCPPort), not flags.
func TestClickHouseServerNamesEveryBadFlag(t *testing.T) {
	code, stderr := runCapturing(t, t.Context(), []string{"clickhouse-server", "--path", t.TempDir(), "--lib", "/nonexistent",
		"--tcp-port", "99999", "--http-port", "18002", "--max-memory-mb", "-1", "--chdb-log-level", "loud"})
	for _, want := range []string{"3 bad settings", "--tcp-port must be a port from 1 to 65535, got 99999",
		"--max-memory-mb must be at least 0, got -1", `--chdb-log-level "loud" is not one of`} {
		if code != 2 || !strings.Contains(stderr, want) {
			t.Errorf("exit %d, want 2 with %q:\n%s", code, want, stderr)
		}
	}
	if strings.Contains(stderr, "ServeOptions") {
		t.Errorf("the message names the library's fields:\n%s", stderr)
	}
}
