package email

import (
	"errors"
	"net/textproto"
	"regexp"
	"strings"

	mail "github.com/wneessen/go-mail"

	"github.com/heraldhq/herald/sinks"
)

// Phase is how far an SMTP transaction got when it failed.
type Phase uint8

// Phases of one send, in order.
const (
	// PhaseSession: connecting, the greeting, EHLO, STARTTLS, AUTH.
	PhaseSession Phase = iota + 1
	// PhaseMail: MAIL FROM.
	PhaseMail
	// PhaseRcpt: RCPT TO, the recipient's address.
	PhaseRcpt
	// PhaseData: the DATA command, before any of the message is written.
	PhaseData
	// PhaseContent: writing the message, before the end-of-data mark.
	PhaseContent
	// PhaseFinal: the end-of-data mark is written, the final reply awaited.
	PhaseFinal
)

// Classify is the table of the package doc: the class of a send that
// failed in phase p with SMTP reply code (0 when no reply came: a
// connection error or a timeout) and enhanced status code (RFC 3463,
// "5.1.1"; "" when the server sent none).
func Classify(p Phase, code int, enhanced string) sinks.Result {
	r := sinks.Result{Status: code, Reason: enhanced}
	if code == 0 {
		if p == PhaseFinal {
			r.Class, r.Rule = sinks.Ambiguous, "no_final_reply"
		} else {
			r.Class, r.Rule = sinks.Retryable, "not_sent"
		}
		return r
	}
	if p == PhaseContent { // a reply while writing: the end-of-data mark was never sent
		r.Class, r.Rule = sinks.Retryable, "not_sent"
		return r
	}
	if code/100 == 4 {
		r.Class, r.Rule = sinks.Retryable, "deferred"
		if p == PhaseSession {
			r.Rule = "session_deferred"
		}
		return r
	}
	if code/100 != 5 { // not an SMTP error reply: the server broke the protocol
		r.Class, r.Rule = sinks.Retryable, "unexpected_reply"
		if p == PhaseFinal {
			r.Class = sinks.Ambiguous
		}
		return r
	}
	r.Class = sinks.Permanent
	switch p {
	case PhaseSession:
		r.Rule = "session_refused"
	case PhaseMail:
		r.Rule = "sender_refused"
	case PhaseRcpt:
		r.Rule = "recipient_refused"
		if mailboxUnavailable(code, enhanced) {
			r.Rule, r.RetireDevice = "mailbox_unavailable", true
		}
	default:
		r.Rule = "message_refused"
	}
	return r
}

// mailboxUnavailable reports whether a RCPT reply says the address does
// not exist (550, 551, 553), and not that a policy refused the message
// (an enhanced code other than 5.1.x, or 5.2.1 "mailbox disabled": 5.7.1
// spam, 5.4.x routing, 5.3.x system).
func mailboxUnavailable(code int, enhanced string) bool {
	if code != 550 && code != 551 && code != 553 {
		return false
	}
	return enhanced == "" || strings.HasPrefix(enhanced, "5.1.") || enhanced == "5.2.1"
}

// classifySend classifies the error of go-mail's SendWithSMTPClient
// (nil: accepted).
func classifySend(err error) sinks.Result {
	if err == nil {
		return sinks.Result{Class: sinks.Success, Rule: "accepted"}
	}
	var se *mail.SendError
	if !errors.As(err, &se) {
		return sinks.Result{Class: sinks.Ambiguous, Rule: "unknown", Err: err}
	}
	var p Phase
	switch se.Reason {
	case mail.ErrSMTPReset: // after the final 250: delivered
		return sinks.Result{Class: sinks.Success, Rule: "accepted"}
	case mail.ErrGetRcpts:
		return sinks.Result{Class: sinks.Permanent, Rule: "bad_address", RetireDevice: true, Err: err}
	case mail.ErrGetSender, mail.ErrNoUnencoded:
		return sinks.Result{Class: sinks.Permanent, Rule: "configuration", Reason: se.Reason.String(), Err: err}
	case mail.ErrConnCheck:
		p = PhaseSession
	case mail.ErrSMTPMailFrom:
		p = PhaseMail
	case mail.ErrSMTPRcptTo:
		p = PhaseRcpt
	case mail.ErrSMTPData:
		p = PhaseData
	case mail.ErrWriteContent:
		p = PhaseContent
	case mail.ErrSMTPDataClose:
		p = PhaseFinal
	default:
		return sinks.Result{Class: sinks.Ambiguous, Rule: "unknown", Reason: se.Reason.String(), Err: err}
	}
	r := Classify(p, se.ErrorCode(), se.EnhancedStatusCode())
	r.Err = err
	return r
}

// classifySession classifies an error of connecting (dial, greeting, EHLO,
// STARTTLS, AUTH): the reply's code when the server sent one.
func classifySession(err error) sinks.Result {
	code, enhanced := replyOf(err)
	r := Classify(PhaseSession, code, enhanced)
	r.Err = err
	return r
}

// replyOf finds the SMTP reply in err: its code and enhanced status code.
func replyOf(err error) (int, string) {
	var te *textproto.Error
	if !errors.As(err, &te) {
		return 0, ""
	}
	enhanced, _, _ := strings.Cut(te.Msg, " ")
	if !enhancedCode.MatchString(enhanced) {
		enhanced = ""
	}
	return te.Code, enhanced
}

// enhancedCode matches an enhanced status code (RFC 3463):
// class.subject.detail.
var enhancedCode = regexp.MustCompile(`^[245]\.[0-9]{1,3}\.[0-9]{1,3}$`)
