package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestTheEmailSinkAndTheSMTPEmulatorRefuseBadSettingsNamingThem: each bad
// --email-* or emulate smtp setting is a usage error naming its flag,
// and the SMTP password never appears in a message.
func TestTheEmailSinkAndTheSMTPEmulatorRefuseBadSettingsNamingThem(t *testing.T) {
	badTemplates := filepath.Join(t.TempDir(), "templates.json")
	if err := os.WriteFile(badTemplates, []byte(`{"types":{"invoice.paid":{"html":"{{.Title"}}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	email := func(extra ...string) []string {
		return append([]string{"--channel", "email", "--email-smtp-host", "smtp.example.com", "--email-from", "a@example.com",
			"--email-smtp-password", "hunter2"}, extra...)
	}
	tests := []struct {
		name string
		run  func(args []string) error
		args []string
		want string
	}{
		{"the email channel needs a server and a sender", sinkCmd, []string{"--channel", "email"}, "--email-smtp-host"},
		{"an unknown TLS mode is named", sinkCmd, email("--email-tls", "maybe"), "--email-tls"},
		{"a sender that is no address is named", sinkCmd, email("--email-from", "nobody"), "--email-from"},
		{"an unsubscribe URL that is not http(s) is named", sinkCmd, email("--email-unsubscribe-url", "ftp://example.com/u"), "--email-unsubscribe-url"},
		{"an unknown AUTH mechanism is named", sinkCmd, email("--email-smtp-auth", "kerberos", "--email-smtp-username", "u"), "--email-smtp-auth"},
		{"AUTH without a user name is named", sinkCmd, email("--email-smtp-auth", "plain"), "--email-smtp-auth"},
		{"a template that does not parse is named", sinkCmd, email("--email-templates", badTemplates), "--email-templates"},
		{"a port out of range is named", sinkCmd, email("--email-smtp-port", "70000"), "--email-smtp-port"},
		{"no connections at all is named", sinkCmd, email("--email-max-connections", "0"), "--email-max-connections"},
		{"a failure rate above 1 is named", emulateCmd, []string{"smtp", "--perm-fail-rate", "2"}, "--perm-fail-rate"},
		{"a certificate file without TLS is named", emulateCmd, []string{"smtp", "--cert-out", "x.pem"}, "--cert-out"},
		{"STARTTLS and implicit TLS at once are refused", emulateCmd, []string{"smtp", "--tls", "--implicit-tls"}, "--implicit-tls"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.run(tt.args)
			if !errors.Is(err, errUsage) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v, want a usage error naming %s", err, tt.want)
			}
			if strings.Contains(err.Error(), "hunter2") {
				t.Fatalf("the message shows the SMTP password: %v", err)
			}
		})
	}
}
