// Package emulator owns herald's local FCM: an HTTP server that answers
// the HTTP v1 API's POST /v1/projects/{project}/messages:send and the
// OAuth 2.0 token endpoint a service account's JWT is exchanged at, as
// Google documents them, with scripted answers per registration token,
// injected faults (sinks/emulate: a reset after the request was read, an
// answer slower than the client's deadline) and a record of every message
// it read. `herald dev` runs it; the FCM adapter's tests send to it.
//
// Its service account (ServiceAccountJSON) is made at Start: the token
// endpoint verifies the JWT's RS256 signature with that key, its issuer,
// audience and scope, and hands out bearer tokens that messages:send
// requires. Documented answers of messages:send:
//
//	200  {"name": "projects/{project}/messages/{id}"}
//	400  INVALID_ARGUMENT: no token, a malformed registration token, a bad
//	     ttl, a message over 4096 bytes
//	401  UNAUTHENTICATED: no or unknown bearer token; THIRD_PARTY_AUTH_ERROR
//	403  PERMISSION_DENIED for another project; SENDER_ID_MISMATCH
//	404  UNREGISTERED
//	429  QUOTA_EXCEEDED (with Retry-After)
//	500  INTERNAL, 503 UNAVAILABLE
//
// The error codes without a request check (UNREGISTERED, QUOTA_EXCEEDED,
// SENDER_ID_MISMATCH, THIRD_PARTY_AUTH_ERROR, UNAVAILABLE, INTERNAL) are
// scripted per token with AddRule (Rule.Reason is the error code; its
// status is FCM's when Rule.Status is 0).
//
// A message counts as received once its request is read, whatever the
// answer.
package emulator

import (
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/heraldhq/herald/sinks/emulate"
)

// Options configure an emulator.
type Options struct {
	// Addr to listen on; "127.0.0.1:0" by default.
	Addr string
	// ProjectID is the Firebase project; "herald-dev" by default.
	ProjectID string
	// BaseURL is the URL clients reach the emulator at (its key's
	// token_uri and the JWT audience it expects); http://Addr by default.
	BaseURL string
	// Latency delays every answer of messages:send.
	Latency time.Duration
	// MaxRecords keeps only the last MaxRecords messages (0: all of them).
	MaxRecords int
	Logger     *slog.Logger
}

// Rule scripts the answer to messages for one registration token; Reason
// is the FCM error code.
type Rule = emulate.Rule

// Faults are injected at random into answers no rule scripts.
type Faults = emulate.Faults

// Message is one messages:send request the emulator read.
type Message struct {
	At             time.Time `json:"at"`
	Token          string    `json:"token"`
	NotificationID string    `json:"notificationId"`
	DeliveryID     string    `json:"deliveryId"`
	CollapseKey    string    `json:"collapseKey"`
	APNsCollapseID string    `json:"apnsCollapseId"`
	TTL            string    `json:"ttl"`
	Priority       string    `json:"priority"`
	Title          string    `json:"title"`
	Body           string    `json:"body"`
	// Answer is the status and error code sent, "reset" or "slow".
	Answer string `json:"answer"`
}

// Emulator is a running local FCM.
type Emulator struct {
	o      Options
	ln     net.Listener
	srv    *http.Server
	key    *rsa.PrivateKey
	email  string
	script emulate.Script
	msgs   *emulate.Log[Message]

	mu     sync.Mutex
	tokens map[string]time.Time // bearer token → expiry
	issued int
}

// Start listens and serves until Close.
func Start(o Options) (*Emulator, error) {
	if o.ProjectID == "" {
		o.ProjectID = "herald-dev"
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, fmt.Errorf("fcm emulator: key: %w", err)
	}
	ln, err := emulate.Listen("fcm emulator", o.Addr)
	if err != nil {
		return nil, err
	}
	e := &Emulator{o: o, ln: ln, key: key, email: "herald-dev@" + o.ProjectID + ".iam.gserviceaccount.com",
		msgs: emulate.NewLog[Message](o.MaxRecords), tokens: map[string]time.Time{}}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /token", e.token)
	mux.HandleFunc("POST /v1/projects/{project}/{rest}", e.send)
	mux.HandleFunc("GET /emulator/messages", e.msgs.Handler("messages"))
	mux.HandleFunc("GET /emulator/service-account.json", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write(e.ServiceAccountJSON())
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) {
		fcmError(w, http.StatusNotFound, "NOT_FOUND", "", "The requested URL was not found on this server.", 0)
	})
	e.srv = emulate.NewServer(mux, o.Logger)
	go e.srv.Serve(ln)
	return e, nil
}

// URL is the emulator's base URL (http://host:port); the adapter's
// endpoint is URL()+"/v1".
func (e *Emulator) URL() string {
	if e.o.BaseURL != "" {
		return strings.TrimSuffix(e.o.BaseURL, "/")
	}
	return "http://" + e.ln.Addr().String()
}

// ProjectID is the emulated project.
func (e *Emulator) ProjectID() string { return e.o.ProjectID }

// ServiceAccountJSON is a service account key file for this emulator: its
// token_uri is the emulator's token endpoint. It holds a private key: a
// test's or dev's, never a real one.
func (e *Emulator) ServiceAccountJSON() []byte {
	der, _ := x509.MarshalPKCS8PrivateKey(e.key)
	b, _ := json.Marshal(map[string]string{
		"type": "service_account", "project_id": e.o.ProjectID, "private_key_id": "herald-dev",
		"private_key":  string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})),
		"client_email": e.email, "client_id": "1", "token_uri": e.URL() + "/token",
		"auth_uri": e.URL() + "/auth",
	})
	return b
}

// AddRule scripts answers; rules are matched in the order added.
func (e *Emulator) AddRule(r Rule) { e.script.AddRule(r) }

// SetFaults sets the random faults.
func (e *Emulator) SetFaults(f Faults) { e.script.SetFaults(f) }

// Received returns the messages read so far, oldest first.
func (e *Emulator) Received() []Message { return e.msgs.Items() }

// Total is the number of messages read since Start.
func (e *Emulator) Total() int { return e.msgs.Total() }

// TokensIssued is the number of access tokens the token endpoint issued.
func (e *Emulator) TokensIssued() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.issued
}

// Close stops the server and drops its connections.
func (e *Emulator) Close() error { return e.srv.Close() }

// token is the OAuth 2.0 JWT-bearer grant (RFC 7523) as Google's token
// endpoint answers it.
func (e *Emulator) token(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		oauthError(w, "invalid_request", "unreadable form")
		return
	}
	if r.Form.Get("grant_type") != "urn:ietf:params:oauth:grant-type:jwt-bearer" {
		oauthError(w, "unsupported_grant_type", "Invalid grant_type: "+r.Form.Get("grant_type"))
		return
	}
	if err := e.verifyJWT(r.Form.Get("assertion")); err != nil {
		oauthError(w, "invalid_grant", err.Error())
		return
	}
	var b [24]byte
	rand.Read(b[:])
	tok := "ya29.emulator-" + hex.EncodeToString(b[:])
	e.mu.Lock()
	e.tokens[tok] = time.Now().Add(time.Hour)
	e.issued++
	e.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]any{"access_token": tok, "token_type": "Bearer", "expires_in": 3599})
}

func (e *Emulator) verifyJWT(assertion string) error {
	parts := strings.Split(assertion, ".")
	if len(parts) != 3 {
		return errors.New("Invalid JWT: not a compact JWS")
	}
	sig, err := base64.RawURLEncoding.DecodeString(parts[2])
	if err != nil {
		return errors.New("Invalid JWT Signature.")
	}
	sum := sha256.Sum256([]byte(parts[0] + "." + parts[1]))
	if rsa.VerifyPKCS1v15(&e.key.PublicKey, crypto.SHA256, sum[:], sig) != nil {
		return errors.New("Invalid JWT Signature.")
	}
	body, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return errors.New("Invalid JWT: unreadable claims")
	}
	var c struct {
		Iss, Aud, Scope string
		Exp, Iat        int64
	}
	if err := json.Unmarshal(body, &c); err != nil {
		return errors.New("Invalid JWT: unreadable claims")
	}
	now := time.Now().Unix()
	switch {
	case c.Iss != e.email:
		return errors.New("Invalid JWT: unknown issuer")
	case c.Aud != e.URL()+"/token":
		return errors.New("Invalid JWT: wrong audience")
	case c.Exp < now || c.Iat > now+300:
		return errors.New("Invalid JWT: Token must be a short-lived token (60 minutes) and in a reasonable timeframe.")
	case !strings.Contains(c.Scope, "firebase.messaging") && !strings.Contains(c.Scope, "cloud-platform"):
		return errors.New("Invalid JWT: no scope for Firebase Cloud Messaging")
	}
	return nil
}

// tokenRE is what the emulator accepts as a registration token.
var tokenRE = regexp.MustCompile(`^[A-Za-z0-9_:\-]{8,}$`)

var ttlRE = regexp.MustCompile(`^[0-9]+(\.[0-9]{1,9})?s$`)

// statusOf is FCM's HTTP status for each error code.
var statusOf = map[string]int{
	"INVALID_ARGUMENT": 400, "THIRD_PARTY_AUTH_ERROR": 401, "SENDER_ID_MISMATCH": 403, "UNREGISTERED": 404,
	"QUOTA_EXCEEDED": 429, "INTERNAL": 500, "UNAVAILABLE": 503, "UNSPECIFIED_ERROR": 500,
}

// rpcStatusOf is the google.rpc status of an HTTP status.
var rpcStatusOf = map[int]string{400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED",
	404: "NOT_FOUND", 429: "RESOURCE_EXHAUSTED", 500: "INTERNAL", 503: "UNAVAILABLE"}

func (e *Emulator) send(w http.ResponseWriter, r *http.Request) {
	if r.PathValue("rest") != "messages:send" {
		fcmError(w, http.StatusNotFound, "NOT_FOUND", "", "The requested URL was not found on this server.", 0)
		return
	}
	raw, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		return // the client went away mid-request: nothing was read
	}
	var req struct {
		ValidateOnly bool `json:"validate_only"`
		Message      struct {
			Token        string            `json:"token"`
			Data         map[string]string `json:"data"`
			Notification struct {
				Title string `json:"title"`
				Body  string `json:"body"`
			} `json:"notification"`
			Android struct {
				CollapseKey string `json:"collapse_key"`
				Priority    string `json:"priority"`
				TTL         string `json:"ttl"`
			} `json:"android"`
			APNS struct {
				Headers map[string]string `json:"headers"`
			} `json:"apns"`
		} `json:"message"`
	}
	jsonErr := json.Unmarshal(raw, &req)
	m := req.Message
	msg := Message{At: time.Now(), Token: m.Token, NotificationID: m.Data["id"], DeliveryID: m.Data["deliveryId"],
		CollapseKey: m.Android.CollapseKey, APNsCollapseID: m.APNS.Headers["apns-collapse-id"], TTL: m.Android.TTL,
		Priority: m.Android.Priority, Title: m.Notification.Title, Body: m.Notification.Body}

	status, code, message := http.StatusOK, "", ""
	switch {
	case !e.authorized(r.Header.Get("Authorization")):
		status, message = http.StatusUnauthorized, "Request is missing required authentication credential. Expected OAuth 2 access token."
	case r.PathValue("project") != e.o.ProjectID:
		status, message = http.StatusForbidden, "Permission 'cloudmessaging.messages.create' denied on resource '//cloudresourcemanager.googleapis.com/projects/"+r.PathValue("project")+"'"
	case jsonErr != nil:
		status, code, message = http.StatusBadRequest, "INVALID_ARGUMENT", "Invalid JSON payload received."
	case m.Token == "":
		status, code, message = http.StatusBadRequest, "INVALID_ARGUMENT", "Recipient of the message is not set."
	case !tokenRE.MatchString(m.Token):
		status, code, message = http.StatusBadRequest, "INVALID_ARGUMENT", "The registration token is not a valid FCM registration token"
	case m.Android.TTL != "" && !ttlRE.MatchString(m.Android.TTL):
		status, code, message = http.StatusBadRequest, "INVALID_ARGUMENT", "Invalid value at 'message.android.ttl' (type.googleapis.com/google.protobuf.Duration), Field 'ttl', Illegal duration format"
	case len(raw) > 4096+512: // the payload limit is 4096 bytes; allow for the envelope
		status, code, message = http.StatusBadRequest, "INVALID_ARGUMENT", "Message is too big"
	}
	var rule Rule
	if status == http.StatusOK {
		var scripted bool
		if rule, scripted = e.script.Answer(m.Token); scripted {
			status, code = rule.Status, rule.Reason
			if status == 0 {
				status = statusOf[code]
			}
			if status == 0 {
				status = http.StatusOK
			}
			message = "scripted by the emulator"
		}
	}
	msg.Answer = rule.Label(status, code)
	if status == http.StatusUnauthorized || status == http.StatusForbidden {
		msg.Answer = rule.Label(status, rpcStatusOf[status])
	}
	e.o.Logger.Debug("fcm emulator read a message", "notification", msg.NotificationID, "answer", msg.Answer)
	e.msgs.Add(msg)
	if !emulate.Hold(r, rule, e.o.Latency) {
		return
	}
	if status != http.StatusOK {
		fcmError(w, status, rpcStatusOf[status], code, message, rule.RetryAfter)
		return
	}
	var id [8]byte
	rand.Read(id[:])
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]string{"name": "projects/" + e.o.ProjectID + "/messages/0:" + hex.EncodeToString(id[:])})
}

func (e *Emulator) authorized(h string) bool {
	tok, ok := strings.CutPrefix(h, "Bearer ")
	if !ok {
		return false
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	exp, ok := e.tokens[tok]
	return ok && time.Now().Before(exp)
}

// fcmError writes a google.rpc.Status error, with the FcmError detail when
// code is set.
func fcmError(w http.ResponseWriter, status int, rpc, code, message string, retryAfter time.Duration) {
	if retryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(int((retryAfter+time.Second-1)/time.Second)))
	}
	if rpc == "" {
		rpc = "UNKNOWN"
	}
	body := map[string]any{"code": status, "message": message, "status": rpc}
	if code != "" {
		body["details"] = []map[string]string{{"@type": "type.googleapis.com/google.firebase.fcm.v1.FcmError", "errorCode": code}}
	}
	w.Header().Set("Content-Type", "application/json; charset=UTF-8")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]any{"error": body})
}

func oauthError(w http.ResponseWriter, code, desc string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusBadRequest)
	json.NewEncoder(w).Encode(map[string]string{"error": code, "error_description": desc})
}
