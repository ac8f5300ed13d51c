// Package emulator owns herald's local webhook receiver: an HTTP server
// that takes webhooks at POST /hooks/{endpoint} and verifies each as a
// Standard Webhooks consumer does (the three headers, the timestamp within
// five minutes, one v1 signature matching one of its secrets), with
// scripted answers per endpoint, injected faults (sinks/emulate: a reset
// after the request was read, an answer slower than the client's
// deadline) and a record of every message it read. `herald dev` and
// `herald emulate webhook` run it; the webhook adapter's tests send to it.
//
// Answers: 204 for a verified message; 401 for one that fails
// verification; a scripted rule's status otherwise (Rule.Token is the
// endpoint, the last path segment; Rule.Reason is ignored). A message
// counts as received once its request is read, whatever the answer.
package emulator

import (
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/heraldhq/herald/sinks/emulate"
	"github.com/heraldhq/herald/sinks/webhook"
)

// Options configure an emulator.
type Options struct {
	// Addr to listen on; "127.0.0.1:0" by default.
	Addr string
	// BaseURL is the URL senders reach it at; http://Addr by default.
	BaseURL string
	// Secrets verify signatures (more with AddSecret); SecretsFunc, when
	// set, is asked too at each message (herald dev: every registered
	// endpoint's secret).
	Secrets     []string
	SecretsFunc func() []string
	// Tolerance of webhook-timestamp (5 minutes by default).
	Tolerance time.Duration
	// Latency delays every answer.
	Latency time.Duration
	// MaxRecords keeps only the last MaxRecords messages (0: all of them).
	MaxRecords int
	Logger     *slog.Logger
}

// Rule scripts the answer to messages for one endpoint ("" for all).
type Rule = emulate.Rule

// Faults are injected at random into answers no rule scripts.
type Faults = emulate.Faults

// Message is one webhook the emulator read.
type Message struct {
	At        time.Time `json:"at"`
	Endpoint  string    `json:"endpoint"`
	ID        string    `json:"webhookId"`
	Timestamp string    `json:"webhookTimestamp"`
	Signature string    `json:"webhookSignature"`
	// Type, DeliveryID and NotificationID are read from the body (the
	// event's type and the delivery its data reports).
	Type           string `json:"type"`
	DeliveryID     string `json:"deliveryId"`
	NotificationID string `json:"notificationId"`
	Body           string `json:"body"`
	// Verified tells the signature matched; VerifyError says why not.
	Verified    bool   `json:"verified"`
	VerifyError string `json:"verifyError,omitempty"`
	// Answer is the status sent, "reset" or "slow".
	Answer string `json:"answer"`
}

// Emulator is a running webhook receiver.
type Emulator struct {
	o      Options
	ln     net.Listener
	srv    *http.Server
	script emulate.Script
	msgs   *emulate.Log[Message]

	mu      sync.Mutex
	secrets []string
}

// Start listens and serves until Close.
func Start(o Options) (*Emulator, error) {
	if o.Tolerance <= 0 {
		o.Tolerance = 5 * time.Minute
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	ln, err := emulate.Listen("webhook emulator", o.Addr)
	if err != nil {
		return nil, err
	}
	e := &Emulator{o: o, ln: ln, msgs: emulate.NewLog[Message](o.MaxRecords), secrets: append([]string(nil), o.Secrets...)}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /hooks/{endpoint}", e.receive)
	mux.HandleFunc("GET /emulator/messages", e.msgs.Handler("messages"))
	e.srv = emulate.NewServer(mux, o.Logger)
	go e.srv.Serve(ln)
	return e, nil
}

// URL is the emulator's base URL; an endpoint's URL is URL()+"/hooks/"+name.
func (e *Emulator) URL() string {
	if e.o.BaseURL != "" {
		return strings.TrimSuffix(e.o.BaseURL, "/")
	}
	return "http://" + e.ln.Addr().String()
}

// EndpointURL is the URL of one endpoint name.
func (e *Emulator) EndpointURL(name string) string { return e.URL() + "/hooks/" + name }

// AddSecret adds a secret signatures are verified with.
func (e *Emulator) AddSecret(s string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.secrets = append(e.secrets, s)
}

// AddRule scripts answers; rules are matched in the order added.
func (e *Emulator) AddRule(r Rule) { e.script.AddRule(r) }

// SetFaults sets the random faults.
func (e *Emulator) SetFaults(f Faults) { e.script.SetFaults(f) }

// Received returns the messages read so far, oldest first.
func (e *Emulator) Received() []Message { return e.msgs.Items() }

// Total is the number of messages read since Start.
func (e *Emulator) Total() int { return e.msgs.Total() }

// Close stops the server and drops its connections.
func (e *Emulator) Close() error { return e.srv.Close() }

func (e *Emulator) receive(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		return // the sender went away mid-request: nothing was read
	}
	e.mu.Lock()
	secrets := append([]string(nil), e.secrets...)
	e.mu.Unlock()
	if e.o.SecretsFunc != nil {
		secrets = append(secrets, e.o.SecretsFunc()...)
	}
	msg := Message{At: time.Now(), Endpoint: r.PathValue("endpoint"), Timestamp: r.Header.Get(webhook.HeaderTimestamp),
		Signature: r.Header.Get(webhook.HeaderSignature), Body: string(body)}
	var ev webhook.Event
	if json.Unmarshal(body, &ev) == nil {
		msg.Type, msg.DeliveryID, msg.NotificationID = ev.Type, ev.Data.DeliveryID, ev.Data.NotificationID
	}
	msg.ID, err = webhook.Verify(r.Header, body, time.Now(), e.o.Tolerance, secrets...)
	msg.Verified = err == nil
	if err != nil {
		msg.VerifyError = err.Error()
	}
	status := http.StatusNoContent
	if !msg.Verified {
		status = http.StatusUnauthorized
	}
	rule, scripted := e.script.Answer(msg.Endpoint)
	if scripted && rule.Status != 0 {
		status = rule.Status
	}
	msg.Answer = rule.Label(status, "")
	e.o.Logger.Debug("webhook emulator read a message", "endpoint", msg.Endpoint, "webhook_id", msg.ID, "verified", msg.Verified, "answer", msg.Answer)
	e.msgs.Add(msg)
	if !emulate.Hold(r, rule, e.o.Latency) {
		return
	}
	if rule.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(int((rule.RetryAfter+time.Second-1)/time.Second)))
	}
	w.WriteHeader(status)
}
