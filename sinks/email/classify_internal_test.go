package email

import (
	"fmt"
	"net/textproto"
	"testing"
)

// TestReplyOfReadsTheEnhancedCodeOnlyWhenItIsOne: the enhanced status code
// is the reply text's first word when it is class.subject.detail.
func TestReplyOfReadsTheEnhancedCodeOnlyWhenItIsOne(t *testing.T) {
	rows := []struct{ msg, want string }{
		{"5.7.8 Authentication failed", "5.7.8"},
		{"4.3.2 Service shutting down", "4.3.2"},
		{"2.0.0 OK", "2.0.0"},
		{"5.100.999 odd but valid", "5.100.999"},
		{"Authentication failed", ""},
		{"3.1.1 no such class", ""},
		{"5.1 too short", ""},
		{"5.1.1.1 too long", ""},
		{"5.1000.1 subject too long", ""},
		{"5.1.1000 detail too long", ""},
		{"5.x.1 not a number", ""},
		{"x5.1.1 prefixed", ""},
	}
	for _, r := range rows {
		t.Run(fmt.Sprintf("%q gives %q", r.msg, r.want), func(t *testing.T) {
			code, enhanced := replyOf(fmt.Errorf("SMTP AUTH failed: %w", &textproto.Error{Code: 535, Msg: r.msg}))
			if code != 535 || enhanced != r.want {
				t.Fatalf("replyOf = %d %q, want 535 %q", code, enhanced, r.want)
			}
		})
	}
	if code, enhanced := replyOf(fmt.Errorf("dial: connection refused")); code != 0 || enhanced != "" {
		t.Fatalf("replyOf(no reply) = %d %q, want 0 \"\"", code, enhanced)
	}
}
