// Package webpush owns herald's Web Push adapter on the sink runtime
// (package sinks): one encrypted push (RFC 8291, aes128gcm) with VAPID
// (RFC 8292) to the browser's push service per attempt, with
// github.com/SherClockHolmes/webpush-go, classified. Retries, intents, the
// sent-set and the audit are the runtime's; webpush-go makes exactly one
// HTTP request per call and never retries.
//
// Every attempt of one delivery carries the same Topic header (RFC 8030
// §5.4: the push service keeps only the newest message of a topic that is
// still pending): the notification id's 16 bytes in unpadded base64url
// (identity.WebPushTopic, 22 characters). TTL is the time left until the
// command's expiry, Urgency comes from the configuration, and the
// encrypted payload is the JSON {"id", "title", "body", "url"} (url from
// the producer's payload, when it has one).
//
// The VAPID key pair comes from configuration (herald dev generates one on
// first start and keeps it in its state); the private key is never logged.
// Browsers subscribe with the public key, which the API serves at
// GET /v1/webpush/vapid-public-key.
//
// # Classification (RFC 8030, RFC 8292, push services' documented answers)
//
//	status   meaning                                   class       rule
//	201      created (any 2xx)                         success     accepted
//	404/410  the subscription expired or is unknown    permanent   expired_subscription (retires the device)
//	413      payload too large                         permanent   payload_too_large
//	-        payload over one 4096-byte record (found  permanent   payload_too_large (keeps the device)
//	         by webpush-go before sending)
//	400      malformed request                         permanent   bad_request
//	401/403  VAPID rejected                            permanent   auth (configuration)
//	429      too many requests                         retryable   too_many_requests (Retry-After honoured)
//	5xx                                                retryable   server_error (Retry-After honoured)
//	other 4xx                                          permanent   http_4xx
//	-        subscription keys unusable (encryption)   permanent   bad_subscription (retires the device)
//	-        connection refused, timeout before the    retryable   not_sent
//	         request headers were written
//	-        timeout, reset or EOF after they were     ambiguous   no_answer
//	         written
package webpush

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"time"

	wp "github.com/SherClockHolmes/webpush-go"

	"github.com/heraldhq/herald/identity"
	"github.com/heraldhq/herald/schemas"
	"github.com/heraldhq/herald/sinks"
)

// Config configures the Web Push adapter.
type Config struct {
	// VAPIDPublicKey and VAPIDPrivateKey are the application server's key
	// pair (unpadded base64url, as GenerateVAPIDKeys makes them).
	VAPIDPublicKey, VAPIDPrivateKey string
	// Subscriber is the VAPID contact: a mailto: address or an https URL
	// (a bare address is taken as a mailto: one).
	Subscriber string
	// Urgency is very-low, low, normal or high (default).
	Urgency string
	// MaxTTL caps the TTL (28 days by default).
	MaxTTL time.Duration
	// Now is the clock for the TTL (time.Now by default).
	Now func() time.Time
}

// GenerateVAPIDKeys makes a new VAPID key pair.
func GenerateVAPIDKeys() (public, private string, err error) {
	private, public, err = wp.GenerateVAPIDKeys()
	return public, private, err
}

// Provider sends Web Push messages.
type Provider struct {
	c    Config
	base *http.Transport
	hc   *http.Client
}

// New builds the adapter.
func New(c Config) (*Provider, error) {
	if c.VAPIDPublicKey == "" || c.VAPIDPrivateKey == "" {
		return nil, errors.New("webpush: the VAPID key pair is required")
	}
	if err := CheckVAPIDKeys(c.VAPIDPublicKey, c.VAPIDPrivateKey); err != nil {
		return nil, err
	}
	if err := CheckSubscriber(c.Subscriber); err != nil {
		return nil, err
	}
	if c.Subscriber == "" {
		c.Subscriber = "mailto:ops@herald.invalid"
	}
	// webpush-go puts "mailto:" before any subscriber that is not an https:
	// URL: given "mailto:ops@…" it would send the contact
	// "mailto:mailto:ops@…" in the VAPID JWT, which push services may refuse.
	c.Subscriber = strings.TrimPrefix(c.Subscriber, "mailto:")
	if c.Urgency == "" {
		c.Urgency = string(wp.UrgencyHigh)
	}
	if c.MaxTTL <= 0 {
		c.MaxTTL = 28 * 24 * time.Hour
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	base := &http.Transport{Proxy: http.ProxyFromEnvironment, ForceAttemptHTTP2: true, MaxIdleConnsPerHost: 16, IdleConnTimeout: 90 * time.Second}
	return &Provider{c: c, base: base, hc: &http.Client{Transport: base}}, nil
}

// Payload is the JSON a service worker decrypts. Type is the
// notification's type, which the web client repeats in its receipts (POST
// /v1/receipts) so the hit-rate queries can count its drops by type.
type Payload struct {
	ID string `json:"id"`
	// OccurrenceID names this acceptance of the notification (empty for
	// one accepted before occurrences existed): the service worker's
	// seen-set drops a repeat of one occurrence and shows a later one,
	// in place of the first (tag = ID).
	OccurrenceID string `json:"occurrenceId,omitempty"`
	Title        string `json:"title,omitempty"`
	Body         string `json:"body,omitempty"`
	URL          string `json:"url,omitempty"`
	Type         string `json:"type,omitempty"`
}

// PayloadOf is the payload of a delivery.
func PayloadOf(cmd *schemas.DeliveryCommand) Payload {
	p := Payload{ID: cmd.NotificationID, OccurrenceID: cmd.OccurrenceID, Title: cmd.Title, Body: cmd.Body, Type: cmd.Type}
	var data struct {
		URL string `json:"url"`
	}
	if json.Unmarshal(cmd.Payload, &data) == nil {
		p.URL = data.URL
	}
	return p
}

// Send implements sinks.Provider.
func (p *Provider) Send(ctx context.Context, cmd *schemas.DeliveryCommand) sinks.Result {
	if cmd.WebPush == nil || cmd.WebPush.Endpoint == "" {
		return sinks.Result{Class: sinks.Permanent, Rule: "bad_subscription", Reason: "no subscription", RetireDevice: true}
	}
	topic, err := identity.WebPushTopic(cmd.NotificationID)
	if err != nil {
		return sinks.Result{Class: sinks.Permanent, Rule: "bad_request", Reason: "notification id", Err: err}
	}
	body, err := json.Marshal(PayloadOf(cmd))
	if err != nil {
		return sinks.Result{Class: sinks.Permanent, Rule: "bad_request", Reason: "unencodable", Err: err}
	}
	ttl := p.c.MaxTTL
	if cmd.ExpiresAt > 0 {
		ttl = min(max(0, time.UnixMilli(cmd.ExpiresAt).Sub(p.c.Now())), p.c.MaxTTL)
	}
	opts := &wp.Options{
		Subscriber: p.c.Subscriber, Topic: topic, TTL: int(ttl / time.Second), Urgency: wp.Urgency(p.c.Urgency),
		VAPIDPublicKey: p.c.VAPIDPublicKey, VAPIDPrivateKey: p.c.VAPIDPrivateKey,
	}
	// The client is set apart: Go's coverage profile leaves the rest of a
	// statement after a function literal out of every block, so the
	// options above would go untested by mutation testing.
	var reached bool
	opts.HTTPClient = doer(func(r *http.Request) (*http.Response, error) { reached = true; return p.hc.Do(r) })
	ctx, wrote := sinks.TraceWrite(ctx)
	resp, err := wp.SendNotificationWithContext(ctx, body, &wp.Subscription{
		Endpoint: cmd.WebPush.Endpoint, Keys: wp.Keys{P256dh: cmd.WebPush.P256dh, Auth: cmd.WebPush.Auth},
	}, opts)
	if err != nil {
		if errors.Is(err, wp.ErrMaxPadExceeded) { // the payload cannot fit one 4096-byte record: the device is fine
			return sinks.Result{Class: sinks.Permanent, Rule: "payload_too_large", Reason: "payload over 4096 bytes", Err: err}
		}
		if !reached { // webpush-go could not encrypt for these keys or build the request
			return sinks.Result{Class: sinks.Permanent, Rule: "bad_subscription", Reason: "unusable subscription", RetireDevice: true, Err: err}
		}
		return sinks.NoAnswer(err, wrote.Load())
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	res := Classify(resp.StatusCode)
	res.RetryAfter = sinks.ParseRetryAfter(resp.Header.Get("Retry-After"), time.Now())
	if res.Class == sinks.Success {
		res.MessageID = resp.Header.Get("Location")
	}
	return res
}

// Classify is the table of the package doc for an HTTP answer.
func Classify(status int) sinks.Result {
	r := sinks.Result{Status: status, Reason: http.StatusText(status)}
	if status >= 200 && status < 300 {
		r.Class, r.Rule, r.Reason = sinks.Success, "accepted", ""
	} else if status == http.StatusNotFound || status == http.StatusGone {
		r.Class, r.Rule, r.RetireDevice = sinks.Permanent, "expired_subscription", true
	} else if status == http.StatusRequestEntityTooLarge {
		r.Class, r.Rule = sinks.Permanent, "payload_too_large"
	} else if status == http.StatusBadRequest {
		r.Class, r.Rule = sinks.Permanent, "bad_request"
	} else if status == http.StatusUnauthorized || status == http.StatusForbidden {
		r.Class, r.Rule = sinks.Permanent, "auth"
	} else if status == http.StatusTooManyRequests {
		r.Class, r.Rule = sinks.Retryable, "too_many_requests"
	} else if status >= 500 {
		r.Class, r.Rule = sinks.Retryable, "server_error"
	} else {
		r.Class, r.Rule = sinks.Permanent, "http_4xx"
	}
	return r
}

// CloseIdleConnections closes the client's idle connections.
func (p *Provider) CloseIdleConnections() { p.base.CloseIdleConnections() }

type doer func(*http.Request) (*http.Response, error)

func (d doer) Do(r *http.Request) (*http.Response, error) { return d(r) }
