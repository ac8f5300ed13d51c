// Package emulator owns herald's local APNs: an HTTP/2-over-TLS server that
// answers POST /3/device/{token} as Apple's provider API documents
// (200; 400 BadDeviceToken, BadCollapseId, BadMessageId, BadPriority,
// PayloadEmpty; 403 MissingProviderToken; 405; 410 Unregistered with its
// timestamp; 413 PayloadTooLarge; 429 TooManyRequests; 500; 503), with
// scripted answers per token, injected faults (slow answers past the
// client's timeout, a stream reset after the request was read) and a record
// of every push it read. `herald dev` and `herald emulate apns` run it; the
// sink's tests send to it.
//
// A push counts as received once its request is read, whatever the answer:
// a device could have shown it. So a reset or a slow answer is a push that
// arrived while the sender cannot know it.
package emulator

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/heraldhq/herald/sinks/emulate"
)

// Options configure an emulator.
type Options struct {
	// Addr to listen on; "127.0.0.1:0" by default.
	Addr string
	// Latency delays every answer (e.g. 20 ms, like the real service).
	Latency time.Duration
	// RequireAuth answers 403 MissingProviderToken to a request with
	// neither a bearer token nor a client certificate.
	RequireAuth bool
	// CertHosts are host names or IPs the self-signed certificate names
	// besides 127.0.0.1, ::1 and localhost (e.g. a compose service name).
	CertHosts []string
	// MaxRecords keeps only the last MaxRecords pushes (0: all of them).
	MaxRecords int
	// Logger logs each push (ids and answer only) at debug level, or at
	// info level with LogPushes.
	Logger    *slog.Logger
	LogPushes bool
}

// Rule scripts the answer to pushes for one token ("" for every token);
// Reason is Apple's reason.
type Rule = emulate.Rule

// Faults are injected at random into answers no rule scripts.
type Faults = emulate.Faults

// Push is one request the emulator read.
type Push struct {
	At             time.Time `json:"at"`
	Token          string    `json:"token"`
	APNsID         string    `json:"apnsId"`
	CollapseID     string    `json:"collapseId"`
	PushType       string    `json:"pushType"`
	Topic          string    `json:"topic"`
	Priority       string    `json:"priority"`
	Expiration     string    `json:"expiration"`
	NotificationID string    `json:"notificationId"`
	DeliveryID     string    `json:"deliveryId"`
	Title          string    `json:"title"`
	// Answer is the status and reason sent, "reset" or "slow".
	Answer string `json:"answer"`
}

// Emulator is a running local APNs.
type Emulator struct {
	o       Options
	ln      net.Listener
	srv     *http.Server
	certPEM []byte
	pool    *x509.CertPool

	script emulate.Script
	pushes *emulate.Log[Push]
}

// Start listens and serves until Close.
func Start(o Options) (*Emulator, error) {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	cert, certPEM, err := emulate.SelfSigned("herald apns emulator", o.CertHosts)
	if err != nil {
		return nil, fmt.Errorf("apns emulator: certificate: %w", err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(certPEM)
	ln, err := emulate.Listen("apns emulator", o.Addr)
	if err != nil {
		return nil, err
	}
	e := &Emulator{o: o, ln: ln, certPEM: certPEM, pool: pool, pushes: emulate.NewLog[Push](o.MaxRecords)}
	mux := http.NewServeMux()
	mux.HandleFunc("/3/device/", e.device)
	mux.HandleFunc("GET /emulator/pushes", e.pushes.Handler("pushes"))
	mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) { answer(w, http.StatusNotFound, "BadPath", 0) })
	e.srv = emulate.NewServer(mux, o.Logger)
	e.srv.TLSConfig = &tls.Config{Certificates: []tls.Certificate{cert}, ClientAuth: tls.RequestClientCert, MinVersion: tls.VersionTLS12}
	e.srv.HTTP2 = &http.HTTP2Config{MaxConcurrentStreams: 1000}
	go e.srv.ServeTLS(ln, "", "")
	return e, nil
}

// URL is the base URL to give the APNs client (https://host:port).
func (e *Emulator) URL() string { return "https://" + e.ln.Addr().String() }

// RootCAs trusts the emulator's self-signed certificate.
func (e *Emulator) RootCAs() *x509.CertPool { return e.pool }

// CertPEM is the emulator's certificate, for clients in other processes.
func (e *Emulator) CertPEM() []byte { return e.certPEM }

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

var uuidRE = regexp.MustCompile(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`)

func (e *Emulator) device(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		answer(w, http.StatusMethodNotAllowed, "MethodNotAllowed", 0)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		return // the client went away mid-request: nothing was read
	}
	token := strings.TrimPrefix(r.URL.Path, "/3/device/")
	p := Push{
		At: time.Now(), Token: token, APNsID: r.Header.Get("apns-id"), CollapseID: r.Header.Get("apns-collapse-id"),
		PushType: r.Header.Get("apns-push-type"), Topic: r.Header.Get("apns-topic"),
		Priority: r.Header.Get("apns-priority"), Expiration: r.Header.Get("apns-expiration"),
	}
	var payload struct {
		APS struct {
			Alert struct {
				Title string `json:"title"`
			} `json:"alert"`
		} `json:"aps"`
		Herald struct {
			ID         string `json:"id"`
			DeliveryID string `json:"deliveryId"`
		} `json:"herald"`
	}
	jsonErr := json.Unmarshal(body, &payload)
	p.NotificationID, p.DeliveryID, p.Title = payload.Herald.ID, payload.Herald.DeliveryID, payload.APS.Alert.Title

	// Apple's request checks, in its documented order of precedence.
	status, reason := http.StatusOK, ""
	switch {
	case e.o.RequireAuth && r.Header.Get("authorization") == "" && (r.TLS == nil || len(r.TLS.PeerCertificates) == 0):
		status, reason = http.StatusForbidden, "MissingProviderToken"
	case token == "" || strings.Contains(token, "/"):
		status, reason = http.StatusBadRequest, "MissingDeviceToken"
	case p.APNsID != "" && !uuidRE.MatchString(p.APNsID):
		status, reason = http.StatusBadRequest, "BadMessageId"
	case len(p.CollapseID) > 64:
		status, reason = http.StatusBadRequest, "BadCollapseId"
	case p.Priority != "" && p.Priority != "5" && p.Priority != "10" && p.Priority != "1":
		status, reason = http.StatusBadRequest, "BadPriority"
	case len(body) == 0:
		status, reason = http.StatusBadRequest, "PayloadEmpty"
	case len(body) > 4096:
		status, reason = http.StatusRequestEntityTooLarge, "PayloadTooLarge"
	case jsonErr != nil:
		status, reason = http.StatusBadRequest, "BadPayload"
	}
	var rule Rule
	if status == http.StatusOK {
		var scripted bool
		if rule, scripted = e.script.Answer(token); scripted {
			status, reason = rule.Status, rule.Reason
			if status == 0 {
				status = http.StatusOK
			}
		}
	}
	p.Answer = rule.Label(status, reason)
	e.record(p)
	if !emulate.Hold(r, rule, e.o.Latency) {
		return
	}
	if p.APNsID == "" {
		p.APNsID = newUUID()
	}
	w.Header().Set("apns-id", p.APNsID)
	answer(w, status, reason, rule.RetryAfter)
}

func (e *Emulator) record(p Push) {
	level := slog.LevelDebug
	if e.o.LogPushes {
		level = slog.LevelInfo
	}
	e.o.Logger.Log(context.Background(), level, "apns emulator received a push", "apns_id", p.APNsID, "notification", p.NotificationID, "answer", p.Answer)
	e.pushes.Add(p)
}

// answer writes an APNs answer: an empty 200, or {"reason": ...} (with
// the time the token became invalid for 410).
func answer(w http.ResponseWriter, status int, reason string, retryAfter time.Duration) {
	if retryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(int((retryAfter+time.Second-1)/time.Second)))
	}
	if status == http.StatusOK {
		w.WriteHeader(status)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	body := map[string]any{"reason": reason}
	if status == http.StatusGone {
		body["timestamp"] = time.Now().UnixMilli()
	}
	json.NewEncoder(w).Encode(body)
}

func newUUID() string {
	var b [16]byte
	rand.Read(b[:])
	b[6], b[8] = b[6]&0x0f|0x40, b[8]&0x3f|0x80
	return fmt.Sprintf("%X-%X-%X-%X-%X", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}

// Shutdown stops accepting and waits for answers in progress until ctx.
func (e *Emulator) Shutdown(ctx context.Context) error {
	if err := e.srv.Shutdown(ctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
