// Package emulator owns herald's local Web Push service with faults: an
// HTTP server that takes pushes at POST /push/{subscription} as a
// browser's push service does (RFC 8030) and answers its documented
// errors, scripted per subscription, with injected faults (sinks/emulate:
// a reset after the request was read, an answer slower than the client's
// deadline) and a record of every push it read. It complements the npm
// package web-push-testing, which decrypts payloads but answers no
// errors: the adapter's classification table is tested here, the payload
// and its encryption there. `herald emulate webpush` runs it.
//
// Subscribe makes a subscription (a P-256 key pair and an auth secret, as
// a browser would) whose endpoint is the emulator. Request checks, in
// order (the answers of FCM's and Mozilla's push services):
//
//	401  no VAPID Authorization header ("vapid t=…, k=…")
//	400  no TTL header, or Content-Encoding other than aes128gcm
//	404  an unknown subscription
//	413  a body over 4096 bytes
//	201  accepted, with a Location header
//
// Scripted rules (Rule.Token is the subscription id, Rule.Status the
// answer: 404, 410, 413, 429 with Retry-After, 5xx) apply to requests that
// pass the checks. The payload is not decrypted.
package emulator

import (
	"crypto/ecdh"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/heraldhq/herald/schemas"
	"github.com/heraldhq/herald/sinks/emulate"
)

// Options configure an emulator.
type Options struct {
	// Addr to listen on; "127.0.0.1:0" by default.
	Addr string
	// Latency delays every answer.
	Latency time.Duration
	// MaxRecords keeps only the last MaxRecords pushes (0: all of them).
	MaxRecords int
	Logger     *slog.Logger
}

// Rule scripts the answer to pushes for one subscription id.
type Rule = emulate.Rule

// Faults are injected at random into answers no rule scripts.
type Faults = emulate.Faults

// Push is one push request the emulator read.
type Push struct {
	At           time.Time `json:"at"`
	Subscription string    `json:"subscription"`
	Topic        string    `json:"topic"`
	TTL          string    `json:"ttl"`
	Urgency      string    `json:"urgency"`
	Encoding     string    `json:"contentEncoding"`
	Bytes        int       `json:"bytes"`
	// Answer is the status sent, "reset" or "slow".
	Answer string `json:"answer"`
}

// Emulator is a running push service.
type Emulator struct {
	o      Options
	ln     net.Listener
	srv    *http.Server
	script emulate.Script
	pushes *emulate.Log[Push]

	mu   sync.Mutex
	subs map[string]bool
}

// Start listens and serves until Close.
func Start(o Options) (*Emulator, error) {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	ln, err := emulate.Listen("webpush emulator", o.Addr)
	if err != nil {
		return nil, err
	}
	e := &Emulator{o: o, ln: ln, pushes: emulate.NewLog[Push](o.MaxRecords), subs: map[string]bool{}}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /push/{subscription}", e.push)
	mux.HandleFunc("POST /emulator/subscribe", func(w http.ResponseWriter, _ *http.Request) {
		sub, err := e.Subscribe("")
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(sub)
	})
	mux.HandleFunc("GET /emulator/pushes", e.pushes.Handler("pushes"))
	e.srv = emulate.NewServer(mux, o.Logger)
	go e.srv.Serve(ln)
	return e, nil
}

// URL is the emulator's base URL.
func (e *Emulator) URL() string { return "http://" + e.ln.Addr().String() }

// Subscribe makes a subscription with the given id (a random one when
// empty): its endpoint is URL()/push/{id}, its keys a fresh P-256 key pair
// and auth secret.
func (e *Emulator) Subscribe(id string) (*schemas.WebPushSubscription, error) {
	if id == "" {
		var b [9]byte
		rand.Read(b[:])
		id = base64.RawURLEncoding.EncodeToString(b[:])
	}
	key, err := ecdh.P256().GenerateKey(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("webpush emulator: key: %w", err)
	}
	var auth [16]byte
	rand.Read(auth[:])
	e.mu.Lock()
	e.subs[id] = true
	e.mu.Unlock()
	return &schemas.WebPushSubscription{Endpoint: e.URL() + "/push/" + id,
		P256dh: base64.RawURLEncoding.EncodeToString(key.PublicKey().Bytes()), Auth: base64.RawURLEncoding.EncodeToString(auth[:])}, nil
}

// AddRule scripts answers; rules are matched in the order added.
func (e *Emulator) AddRule(r Rule) { e.script.AddRule(r) }

// SetFaults sets the random faults.
func (e *Emulator) SetFaults(f Faults) { e.script.SetFaults(f) }

// Received returns the pushes read so far, oldest first.
func (e *Emulator) Received() []Push { return e.pushes.Items() }

// Total is the number of pushes read since Start.
func (e *Emulator) Total() int { return e.pushes.Total() }

// Close stops the server and drops its connections.
func (e *Emulator) Close() error { return e.srv.Close() }

// maxBody is the payload limit push services enforce (RFC 8291 §4).
const maxBody = 4096

func (e *Emulator) push(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		return
	}
	id := r.PathValue("subscription")
	p := Push{At: time.Now(), Subscription: id, Topic: r.Header.Get("Topic"), TTL: r.Header.Get("TTL"),
		Urgency: r.Header.Get("Urgency"), Encoding: r.Header.Get("Content-Encoding"), Bytes: len(body)}
	e.mu.Lock()
	known := e.subs[id]
	e.mu.Unlock()
	status := http.StatusCreated
	switch {
	case !strings.HasPrefix(r.Header.Get("Authorization"), "vapid "):
		status = http.StatusUnauthorized
	case p.TTL == "" || p.Encoding != "aes128gcm":
		status = http.StatusBadRequest
	case !known:
		status = http.StatusNotFound
	case len(body) > maxBody:
		status = http.StatusRequestEntityTooLarge
	}
	var rule Rule
	if status == http.StatusCreated {
		var scripted bool
		if rule, scripted = e.script.Answer(id); scripted && rule.Status != 0 {
			status = rule.Status
		}
	}
	p.Answer = rule.Label(status, "")
	e.o.Logger.Debug("webpush emulator read a push", "subscription", id, "answer", p.Answer)
	e.pushes.Add(p)
	if !emulate.Hold(r, rule, e.o.Latency) {
		return
	}
	if rule.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(int((rule.RetryAfter+time.Second-1)/time.Second)))
	}
	if status == http.StatusCreated {
		w.Header().Set("Location", e.URL()+"/message/"+id+"/"+strconv.Itoa(e.pushes.Total()))
	}
	w.WriteHeader(status)
}
