package email_test

import (
	"testing"

	"github.com/heraldhq/herald/sinks"
	"github.com/heraldhq/herald/sinks/email"
)

// TestClassifyFollowsThePackageTable: each row of the package doc's table.
func TestClassifyFollowsThePackageTable(t *testing.T) {
	rows := []struct {
		name     string
		phase    email.Phase
		code     int
		enhanced string
		class    sinks.Class
		rule     string
		retire   bool
	}{
		{"no reply while connecting is retried: nothing was sent", email.PhaseSession, 0, "", sinks.Retryable, "not_sent", false},
		{"a 421 greeting is retried", email.PhaseSession, 421, "4.3.2", sinks.Retryable, "session_deferred", false},
		{"a 535 authentication failure is permanent", email.PhaseSession, 535, "5.7.8", sinks.Permanent, "session_refused", false},
		{"no reply to MAIL FROM is retried", email.PhaseMail, 0, "", sinks.Retryable, "not_sent", false},
		{"a 451 to MAIL FROM is retried", email.PhaseMail, 451, "", sinks.Retryable, "deferred", false},
		{"a 550 to MAIL FROM refuses the sender, not the address", email.PhaseMail, 550, "5.7.1", sinks.Permanent, "sender_refused", false},
		{"a 450 mailbox busy is retried", email.PhaseRcpt, 450, "4.2.1", sinks.Retryable, "deferred", false},
		{"a greylisting 451 is retried", email.PhaseRcpt, 451, "4.7.1", sinks.Retryable, "deferred", false},
		{"a 550 without an enhanced code retires the address", email.PhaseRcpt, 550, "", sinks.Permanent, "mailbox_unavailable", true},
		{"a 550 5.1.1 unknown user retires the address", email.PhaseRcpt, 550, "5.1.1", sinks.Permanent, "mailbox_unavailable", true},
		{"a 550 5.2.1 disabled mailbox retires the address", email.PhaseRcpt, 550, "5.2.1", sinks.Permanent, "mailbox_unavailable", true},
		{"a 551 user not local retires the address", email.PhaseRcpt, 551, "5.1.6", sinks.Permanent, "mailbox_unavailable", true},
		{"a 553 mailbox name not allowed retires the address", email.PhaseRcpt, 553, "5.1.3", sinks.Permanent, "mailbox_unavailable", true},
		{"a 550 5.7.1 policy refusal keeps the address", email.PhaseRcpt, 550, "5.7.1", sinks.Permanent, "recipient_refused", false},
		{"a 552 mailbox full keeps the address", email.PhaseRcpt, 552, "5.2.2", sinks.Permanent, "recipient_refused", false},
		{"a 554 to RCPT keeps the address", email.PhaseRcpt, 554, "", sinks.Permanent, "recipient_refused", false},
		{"a 451 to DATA is retried", email.PhaseData, 451, "", sinks.Retryable, "deferred", false},
		{"a 554 to DATA is permanent", email.PhaseData, 554, "", sinks.Permanent, "message_refused", false},
		{"no reply to DATA is retried: the message was not written", email.PhaseData, 0, "", sinks.Retryable, "not_sent", false},
		{"a cut while writing the message is retried: the end of data was not written", email.PhaseContent, 0, "", sinks.Retryable, "not_sent", false},
		{"no final reply is ambiguous", email.PhaseFinal, 0, "", sinks.Ambiguous, "no_final_reply", false},
		{"a final 451 is retried", email.PhaseFinal, 451, "4.3.0", sinks.Retryable, "deferred", false},
		{"a final 550 spam refusal is permanent and keeps the address", email.PhaseFinal, 550, "5.7.1", sinks.Permanent, "message_refused", false},
		{"a final 552 size refusal is permanent", email.PhaseFinal, 552, "5.3.4", sinks.Permanent, "message_refused", false},
		{"a final reply that is no error reply is ambiguous", email.PhaseFinal, 354, "", sinks.Ambiguous, "unexpected_reply", false},
	}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			got := email.Classify(r.phase, r.code, r.enhanced)
			if got.Class != r.class || got.Rule != r.rule || got.RetireDevice != r.retire || got.Status != r.code {
				t.Fatalf("Classify(%d, %d, %q) = %s %s retire=%v status=%d, want %s %s retire=%v status=%d",
					r.phase, r.code, r.enhanced, got.Class, got.Rule, got.RetireDevice, got.Status, r.class, r.rule, r.retire, r.code)
			}
		})
	}
}
