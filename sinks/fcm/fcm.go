// Package fcm owns herald's Firebase Cloud Messaging adapter on the sink
// runtime (package sinks): one HTTP v1 messages:send call per attempt with
// firebase.google.com/go/v4/messaging, classified. Retries, intents, the
// sent-set and the audit are the runtime's.
//
// Every attempt of one delivery carries the same ids: android.collapse_key
// and the apns-collapse-id header (iOS through FCM) are the notification
// id, and data carries "id" (the notification id) and "deliveryId" for the
// app's own seen-set. android.ttl and apns-expiration come from the
// command's expiry.
//
// Authentication is a service account key (JSON) from configuration: its
// access tokens are fetched from the key's token_uri (golang.org/x/oauth2's
// JWT flow) under the send's context, so the send's deadline bounds the
// fetch too, and cached until shortly before they expire; the key is never
// logged.
//
// # Every HTTP attempt is one herald attempt
//
// The SDK retries by itself: messaging.NewClient wraps the HTTP client in
// internal.WithDefaultRetryConfig (firebase.google.com/go/v4/internal/
// http_client.go), which retries every network error and every 503 up to 4
// times, waiting for Retry-After or an exponential backoff (the first retry
// at once). Those calls would never reach herald's attempt log, and a
// network error after the request was written would be retried as if
// nothing had been sent. The retry policy cannot be configured from
// outside the SDK, so the adapter gives the SDK its own http.Client
// (option.WithHTTPClient, which the SDK uses as is) whose innermost
// transport (one) lets exactly one request through per Send: it reads the
// whole answer (or the transport error) into the call's record and then
// cancels the call's context. The SDK's retry loop checks that context
// before any retry (HTTPClient.Do, attemptResult.waitForRetry) and gives
// up; a second request would be refused by the transport without being
// sent. Send classifies the recorded answer, never the SDK's error, so the
// attempt log is the truth. TestTheSDKMakesOneRequestPerAttempt shows it
// with a 503 and with a reset.
//
// # Classification (FCM HTTP v1, "ErrorCode" of google.firebase.fcm.v1)
//
//	status  error code                                 class       rule
//	200     -                                          success     accepted
//	404     UNREGISTERED                               permanent   unregistered (retires the device)
//	400     INVALID_ARGUMENT about the registration    permanent   bad_token (retires the device)
//	        token ("not a valid FCM registration token")
//	400     INVALID_ARGUMENT, anything else            permanent   invalid_argument
//	403     SENDER_ID_MISMATCH                         permanent   sender_id_mismatch (configuration)
//	401     THIRD_PARTY_AUTH_ERROR                     permanent   third_party_auth (configuration)
//	401/403 UNAUTHENTICATED, PERMISSION_DENIED         permanent   auth (configuration)
//	-       the token endpoint refused the key (4xx)   permanent   auth (configuration)
//	429     QUOTA_EXCEEDED                             retryable   quota_exceeded (Retry-After honoured)
//	503     UNAVAILABLE                                retryable   unavailable (Retry-After honoured)
//	500     INTERNAL                                   retryable   internal (Retry-After honoured)
//	other 4xx                                          permanent   http_4xx
//	other 5xx                                          retryable   http_5xx
//	-       the SDK refused the message                permanent   bad_request
//	-       connection refused, token endpoint down,   retryable   not_sent
//	        timeout before the headers were written
//	-       timeout, reset or EOF after they were      ambiguous   no_answer
//	        written
package fcm

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	firebase "firebase.google.com/go/v4"
	"firebase.google.com/go/v4/messaging"
	"golang.org/x/oauth2"
	"golang.org/x/oauth2/google"
	"golang.org/x/oauth2/jwt"
	"google.golang.org/api/option"

	"github.com/heraldhq/herald/schemas"
	"github.com/heraldhq/herald/sinks"
)

// Scope is the OAuth scope of the FCM HTTP v1 API.
const Scope = "https://www.googleapis.com/auth/firebase.messaging"

// Config configures the FCM adapter.
type Config struct {
	// Endpoint is the API's base URL: "https://fcm.googleapis.com/v1" by
	// default, an emulator's URL + "/v1" in dev and tests.
	Endpoint string
	// CredentialsFile or CredentialsJSON is the service account key.
	CredentialsFile string
	CredentialsJSON []byte
	// ProjectID is the Firebase project; the key's project_id by default.
	ProjectID string
	// Priority is android.priority: "high" (default) or "normal".
	Priority string
	// MaxTTL caps the TTL (FCM's maximum, 28 days, by default).
	MaxTTL time.Duration
	// Now is the clock for the TTL (time.Now by default).
	Now func() time.Time
	// TokenTimeout bounds a fetch of an access token (10 s by default);
	// the send's own deadline, when sooner, bounds it too.
	TokenTimeout time.Duration
}

// Provider sends messages through FCM.
type Provider struct {
	cl       *messaging.Client
	base     *http.Transport
	priority string
	maxTTL   time.Duration
	now      func() time.Time
}

// New builds the adapter; the token endpoint is not called until the
// first send.
func New(ctx context.Context, c Config) (*Provider, error) {
	key := c.CredentialsJSON
	if len(key) == 0 && c.CredentialsFile != "" {
		var err error
		if key, err = os.ReadFile(c.CredentialsFile); err != nil {
			return nil, fmt.Errorf("fcm: read the service account key: %w", err)
		}
	}
	if len(key) == 0 {
		return nil, errors.New("fcm: a service account key (file or JSON) is required")
	}
	base := &http.Transport{
		Proxy:               http.ProxyFromEnvironment,
		ForceAttemptHTTP2:   true,
		MaxIdleConnsPerHost: 64,
		IdleConnTimeout:     90 * time.Second,
	}
	creds, err := google.CredentialsFromJSON(ctx, key, Scope)
	if err != nil {
		return nil, errors.New("fcm: the service account key is unreadable") // never echo the key
	}
	jwtConf, err := google.JWTConfigFromJSON(key, Scope)
	if err != nil {
		return nil, errors.New("fcm: the key is not a service account key") // never echo the key
	}
	if c.TokenTimeout <= 0 {
		c.TokenTimeout = 10 * time.Second
	}
	project := c.ProjectID
	if project == "" {
		project = creds.ProjectID
	}
	if project == "" {
		return nil, errors.New("fcm: no project id (configure it or use a key with project_id)")
	}
	auth := &bearer{conf: jwtConf, timeout: c.TokenTimeout, sem: make(chan struct{}, 1), next: &one{base}}
	hc := &http.Client{Transport: &reached{auth}}
	opts := []option.ClientOption{option.WithHTTPClient(hc)}
	if c.Endpoint != "" {
		opts = append(opts, option.WithEndpoint(strings.TrimSuffix(c.Endpoint, "/")))
	}
	app, err := firebase.NewApp(ctx, &firebase.Config{ProjectID: project}, opts...)
	if err != nil {
		return nil, fmt.Errorf("fcm: app: %w", err)
	}
	cl, err := app.Messaging(ctx)
	if err != nil {
		return nil, fmt.Errorf("fcm: messaging client: %w", err)
	}
	p := &Provider{cl: cl, base: base, priority: c.Priority, maxTTL: c.MaxTTL, now: c.Now}
	if p.priority == "" {
		p.priority = "high"
	}
	if p.maxTTL <= 0 {
		p.maxTTL = 28 * 24 * time.Hour
	}
	if p.now == nil {
		p.now = time.Now
	}
	return p, nil
}

// Message returns what an attempt of the delivery sends at now.
func (p *Provider) Message(cmd *schemas.DeliveryCommand, now time.Time) *messaging.Message {
	data := map[string]string{"id": cmd.NotificationID, "deliveryId": cmd.DeliveryID}
	if cmd.OccurrenceID != "" {
		data["occurrenceId"] = cmd.OccurrenceID
	}
	if cmd.Type != "" {
		data["type"] = cmd.Type
	}
	if len(cmd.Payload) > 0 {
		data["payload"] = string(cmd.Payload)
	}
	m := &messaging.Message{
		Token:        cmd.Token,
		Data:         data,
		Notification: &messaging.Notification{Title: cmd.Title, Body: cmd.Body},
		Android:      &messaging.AndroidConfig{CollapseKey: cmd.NotificationID, Priority: p.priority},
		APNS:         &messaging.APNSConfig{Headers: map[string]string{"apns-collapse-id": cmd.NotificationID}},
	}
	if cmd.ExpiresAt > 0 {
		ttl := min(max(0, time.UnixMilli(cmd.ExpiresAt).Sub(now).Truncate(time.Second)), p.maxTTL)
		m.Android.TTL = &ttl
		m.APNS.Headers["apns-expiration"] = strconv.FormatInt(cmd.ExpiresAt/1000, 10)
	}
	return m
}

// Send implements sinks.Provider.
func (p *Provider) Send(ctx context.Context, cmd *schemas.DeliveryCommand) sinks.Result {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	a := &attempt{cancel: cancel}
	ctx = context.WithValue(ctx, attemptKey{}, a)
	ctx, wrote := sinks.TraceWrite(ctx)
	name, err := p.cl.Send(ctx, p.Message(cmd, p.now()))

	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.reached {
		return sinks.Result{Class: sinks.Permanent, Rule: "bad_request", Reason: "refused by the SDK", Err: err}
	} else if !a.sent {
		// The oauth2 transport failed before the request: the token
		// endpoint did not give a token.
		var re *oauth2.RetrieveError
		if errors.As(a.err, &re) && re.Response != nil && re.Response.StatusCode >= 400 && re.Response.StatusCode < 500 {
			code := re.ErrorCode
			if code == "" { // the JWT flow leaves the body unparsed
				var b struct {
					Error string `json:"error"`
				}
				_ = json.Unmarshal(re.Body, &b)
				code = b.Error
			}
			return sinks.Result{Class: sinks.Permanent, Rule: "auth", Reason: code, Status: re.Response.StatusCode, Err: errors.New("fcm: the token endpoint refused the service account key")}
		}
		return sinks.Result{Class: sinks.Retryable, Rule: "not_sent", Err: a.err}
	} else if a.status == 0 {
		return sinks.NoAnswer(a.err, wrote.Load())
	}
	res := Classify(a.status, a.body)
	res.RetryAfter = sinks.ParseRetryAfter(a.header.Get("Retry-After"), time.Now())
	if res.Class == sinks.Success {
		res.MessageID = name
	}
	return res
}

// Classify is the table of the package doc for an HTTP answer of
// messages:send.
func Classify(status int, body []byte) sinks.Result {
	var e struct {
		Error struct {
			Message string `json:"message"`
			Status  string `json:"status"`
			Details []struct {
				Type      string `json:"@type"`
				ErrorCode string `json:"errorCode"`
			} `json:"details"`
		} `json:"error"`
	}
	_ = json.Unmarshal(body, &e) // an unreadable body leaves the status to decide
	code := ""
	for _, d := range e.Error.Details {
		if strings.HasSuffix(d.Type, "google.firebase.fcm.v1.FcmError") {
			code = d.ErrorCode
		}
	}
	r := sinks.Result{Status: status, Reason: code}
	if r.Reason == "" {
		r.Reason = e.Error.Status
	}
	if status == http.StatusOK {
		r.Class, r.Rule, r.Reason = sinks.Success, "accepted", ""
	} else if code == "UNREGISTERED" {
		r.Class, r.Rule, r.RetireDevice = sinks.Permanent, "unregistered", true
	} else if code == "INVALID_ARGUMENT" && strings.Contains(strings.ToLower(e.Error.Message), "registration token") {
		r.Class, r.Rule, r.RetireDevice = sinks.Permanent, "bad_token", true
	} else if code == "INVALID_ARGUMENT" {
		r.Class, r.Rule = sinks.Permanent, "invalid_argument"
	} else if code == "SENDER_ID_MISMATCH" {
		r.Class, r.Rule = sinks.Permanent, "sender_id_mismatch"
	} else if code == "THIRD_PARTY_AUTH_ERROR" {
		r.Class, r.Rule = sinks.Permanent, "third_party_auth"
	} else if code == "QUOTA_EXCEEDED" || (code == "" && status == http.StatusTooManyRequests) {
		r.Class, r.Rule = sinks.Retryable, "quota_exceeded"
	} else if code == "UNAVAILABLE" || (code == "" && status == http.StatusServiceUnavailable) {
		r.Class, r.Rule = sinks.Retryable, "unavailable"
	} else if code == "INTERNAL" || (code == "" && status == http.StatusInternalServerError) {
		r.Class, r.Rule = sinks.Retryable, "internal"
	} else if status == http.StatusUnauthorized || status == http.StatusForbidden {
		r.Class, r.Rule = sinks.Permanent, "auth"
	} else if status >= 500 {
		r.Class, r.Rule = sinks.Retryable, "http_5xx"
	} else {
		r.Class, r.Rule = sinks.Permanent, "http_4xx"
	}
	return r
}

// CloseIdleConnections closes the client's idle connections.
func (p *Provider) CloseIdleConnections() { p.base.CloseIdleConnections() }

// attempt records the one HTTP request of a Send.
type attempt struct {
	cancel context.CancelFunc

	mu      sync.Mutex
	reached bool // the SDK handed the request to the HTTP client
	sent    bool // the request went to the provider's transport
	status  int
	header  http.Header
	body    []byte
	err     error
}

type attemptKey struct{}

func attemptOf(r *http.Request) *attempt {
	a, _ := r.Context().Value(attemptKey{}).(*attempt)
	return a
}

// reached is the outermost transport: it notes that the SDK made a request
// and, when the oauth2 transport below fails before sending it, why.
type reached struct{ next http.RoundTripper }

func (t *reached) RoundTrip(req *http.Request) (*http.Response, error) {
	a := attemptOf(req)
	if a != nil {
		a.mu.Lock()
		a.reached = true
		a.mu.Unlock()
	}
	resp, err := t.next.RoundTrip(req)
	if err != nil && a != nil {
		a.mu.Lock()
		if !a.sent {
			a.err = err
			a.cancel() // no SDK retry of a token failure either
		}
		a.mu.Unlock()
	}
	return resp, err
}

// bearer is the transport that authenticates: it sets the service
// account's access token on each request, fetching a new one from the
// key's token_uri when the cached one is missing or about to expire
// (oauth2.Token.Valid). It fetches under the request's context, so the
// send's deadline and cancellation bound the token fetch as they bound the
// send (oauth2.Transport would fetch under a context of its own, and
// x/oauth2/jwt posts without any: only a client timeout could stop it).
// One fetch at a time: a caller waiting for another's fetch gives up when
// its own context ends.
type bearer struct {
	conf    *jwt.Config
	timeout time.Duration // of one fetch, however long the send may take
	sem     chan struct{} // held while the token is read or fetched
	tok     *oauth2.Token // guarded by sem
	next    http.RoundTripper
}

func (b *bearer) RoundTrip(req *http.Request) (*http.Response, error) {
	tok, err := b.token(req.Context())
	if err != nil {
		if req.Body != nil {
			req.Body.Close()
		}
		return nil, err
	}
	r := req.Clone(req.Context())
	tok.SetAuthHeader(r)
	return b.next.RoundTrip(r)
}

func (b *bearer) token(ctx context.Context) (*oauth2.Token, error) {
	select {
	case b.sem <- struct{}{}:
	case <-ctx.Done():
		return nil, fmt.Errorf("fcm: wait for an access token: %w", ctx.Err())
	}
	defer func() { <-b.sem }()
	if b.tok.Valid() {
		return b.tok, nil
	}
	// A context of its own, ended by ctx: the send's values (its write
	// trace above all, which tells a sent request from an unsent one) stay
	// out of the token fetch.
	fetch, cancel := context.WithTimeout(context.Background(), b.timeout)
	defer cancel()
	defer context.AfterFunc(ctx, cancel)()
	hc := &http.Client{Transport: withContext{fetch, http.DefaultTransport}}
	tok, err := b.conf.TokenSource(context.WithValue(fetch, oauth2.HTTPClient, hc)).Token()
	if err != nil {
		cause := ctx.Err()
		if cause == nil {
			cause = fetch.Err()
		}
		if cause != nil { // x/oauth2/jwt formats the cause with %v
			return nil, fmt.Errorf("fcm: fetch an access token: %w (%v)", cause, err)
		}
		return nil, err // an *oauth2.RetrieveError when the endpoint answered
	}
	b.tok = tok
	return tok, nil
}

// withContext sends every request under ctx.
type withContext struct {
	ctx  context.Context
	next http.RoundTripper
}

func (t withContext) RoundTrip(req *http.Request) (*http.Response, error) {
	return t.next.RoundTrip(req.WithContext(t.ctx))
}

// errSecondRequest is what a second request of one Send gets, unsent.
var errSecondRequest = errors.New("fcm: one request per attempt (the SDK's retry was refused)")

// one is the innermost transport: one request per Send, answer read
// whole, then the Send's context cancelled so the SDK cannot retry.
type one struct{ next http.RoundTripper }

func (t *one) RoundTrip(req *http.Request) (*http.Response, error) {
	a := attemptOf(req)
	if a == nil {
		return t.next.RoundTrip(req)
	}
	a.mu.Lock()
	if a.sent {
		a.mu.Unlock()
		return nil, errSecondRequest
	}
	a.sent = true
	a.mu.Unlock()

	resp, err := t.next.RoundTrip(req)
	var body []byte
	if err == nil {
		body, err = io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		resp.Body.Close()
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	defer a.cancel()
	if err != nil {
		a.err = err
		return nil, err
	}
	a.status, a.header, a.body = resp.StatusCode, resp.Header, body
	resp.Body = io.NopCloser(bytes.NewReader(body))
	return resp, nil
}
