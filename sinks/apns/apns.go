// Package apns owns herald's APNs adapter on the sink runtime (package
// sinks): it makes one HTTP/2 call to Apple's provider API with
// github.com/sideshow/apns2 and classifies the answer. Retries, intents,
// the sent-set and the audit are the runtime's.
//
// Every call of one delivery carries the same ids: apns-id is the UUIDv5 of
// the notification id (identity.APNsID), apns-collapse-id is the
// notification id, and the payload carries the notification id under
// "herald" for the app's own seen-set. apns-expiration is the command's
// expiry, apns-priority and apns-push-type come from the configuration.
//
// Authentication is by token (a .p8 key, key id and team id) or by a client
// certificate (.p12 or PEM); neither is ever logged.
//
// # Classification (Apple, "Handling notification responses from APNs")
//
//	status  reason                                       class       rule
//	200     -                                            success     accepted
//	400     BadDeviceToken, DeviceTokenNotForTopic       permanent   bad_device_token (retires the device)
//	400     any other (PayloadEmpty, BadCollapseId, ...)  permanent   bad_request
//	403     ExpiredProviderToken, InvalidProviderToken,  permanent   auth
//	        BadCertificate, Forbidden, ...
//	404/405 BadPath, MethodNotAllowed                    permanent   bad_request
//	410     Unregistered, ExpiredToken                   permanent   unregistered (retires the device)
//	413     PayloadTooLarge                              permanent   payload_too_large
//	429     TooManyRequests, TooManyProviderTokenUpdates retryable   too_many_requests (Retry-After honoured)
//	500     InternalServerError                          retryable   server_error
//	503     ServiceUnavailable, Shutdown                 retryable   unavailable
//	other 4xx                                            permanent   http_4xx
//	other 5xx                                            retryable   http_5xx
//	-       connection refused, TLS, timeout before the  retryable   not_sent
//	        request headers were written
//	-       timeout, reset or EOF after they were        ambiguous   no_answer
//	        written
//
// "Written" is observed with net/http/httptrace (WroteHeaders): from then on
// Apple may have the request, so a missing answer is ambiguous.
package apns

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/sideshow/apns2"
	"github.com/sideshow/apns2/certificate"
	"github.com/sideshow/apns2/token"

	"github.com/heraldhq/herald/identity"
	"github.com/heraldhq/herald/schemas"
	"github.com/heraldhq/herald/sinks"
)

// Config configures the APNs adapter.
type Config struct {
	// Host is the provider API's base URL: apns2.HostProduction,
	// apns2.HostDevelopment, or an emulator's URL.
	Host string
	// Topic is the app's bundle id (apns-topic).
	Topic string
	// Token authentication: the .p8 key file, its key id and the team id.
	KeyFile, KeyID, TeamID string
	// Certificate authentication: a .p12 or PEM file and its password.
	CertFile, CertPassword string
	// RootCAs trusts a server certificate (an emulator's); nil uses the
	// system's roots.
	RootCAs *x509.CertPool
	// Priority is apns-priority: 10 (default) or 5.
	Priority int
	// PushType is apns-push-type: "alert" by default.
	PushType string
}

// Provider sends pushes to APNs.
type Provider struct {
	cl       *apns2.Client
	priority int
	pushType apns2.EPushType
	topic    string
}

// New builds the adapter. Exactly one of token or certificate auth must be
// configured; with neither, the client sends unauthenticated requests,
// which only an emulator accepts.
func New(c Config) (*Provider, error) {
	if c.Host == "" {
		return nil, errors.New("apns: Host is required")
	}
	tlsCfg := &tls.Config{RootCAs: c.RootCAs, MinVersion: tls.VersionTLS12}
	var cl *apns2.Client
	if c.KeyFile != "" && c.CertFile != "" {
		return nil, errors.New("apns: configure token auth (key file) or certificate auth, not both")
	} else if c.KeyFile != "" {
		key, err := token.AuthKeyFromFile(c.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("apns: read the .p8 key: %w", err) // the error names the file, never the key
		}
		if c.KeyID == "" || c.TeamID == "" {
			return nil, errors.New("apns: token auth needs the key id and the team id")
		}
		cl = apns2.NewTokenClient(&token.Token{AuthKey: key, KeyID: c.KeyID, TeamID: c.TeamID})
	} else if c.CertFile != "" {
		var cert tls.Certificate
		var err error
		if strings.EqualFold(filepath.Ext(c.CertFile), ".p12") {
			cert, err = certificate.FromP12File(c.CertFile, c.CertPassword)
		} else {
			cert, err = certificate.FromPemFile(c.CertFile, c.CertPassword)
		}
		if err != nil {
			return nil, fmt.Errorf("apns: read the client certificate: %w", err)
		}
		cl = apns2.NewClient(cert)
		tlsCfg.Certificates = []tls.Certificate{cert}
	} else {
		cl = &apns2.Client{}
	}
	// Our own transport: HTTP/2 over TLS with the configured roots, many
	// streams per connection, and more connections when they run out; the
	// per-call deadline is the context's, not a client timeout.
	cl.HTTPClient = &http.Client{Transport: &retryAfter{&http.Transport{
		TLSClientConfig:     tlsCfg,
		ForceAttemptHTTP2:   true,
		MaxIdleConnsPerHost: 16,
		// Without a bound a burst of calls before the first connection is
		// up dials (and TLS-handshakes) once per call; with it they wait
		// for the connection and share its streams.
		MaxConnsPerHost: 16,
		IdleConnTimeout: 90 * time.Second,
	}}}
	cl.Host = c.Host
	p := &Provider{cl: cl, priority: c.Priority, pushType: apns2.EPushType(c.PushType), topic: c.Topic}
	if p.priority == 0 {
		p.priority = apns2.PriorityHigh
	}
	if p.pushType == "" {
		p.pushType = apns2.PushTypeAlert
	}
	return p, nil
}

// Payload is what herald puts in a push's JSON body.
type Payload struct {
	APS    APS    `json:"aps"`
	Herald Herald `json:"herald"`
}

// APS is Apple's dictionary.
type APS struct {
	Alert    Alert  `json:"alert"`
	ThreadID string `json:"thread-id,omitempty"`
}

// Alert is the visible text.
type Alert struct {
	Title string `json:"title,omitempty"`
	Body  string `json:"body,omitempty"`
}

// Herald carries the ids for the app's seen-set and the producer's payload.
type Herald struct {
	ID         string          `json:"id"`
	DeliveryID string          `json:"deliveryId"`
	Type       string          `json:"type,omitempty"`
	Data       json.RawMessage `json:"data,omitempty"`
}

// Notification returns the apns2 notification of a delivery command: what
// every attempt of it sends.
func (p *Provider) Notification(cmd *schemas.DeliveryCommand) (*apns2.Notification, error) {
	apnsID := cmd.APNsID
	if apnsID == "" {
		apnsID = identity.APNsID(schemas.Occurrence(cmd.NotificationID, cmd.OccurrenceID))
	}
	collapse := cmd.CollapseID
	if collapse == "" {
		var err error
		if collapse, err = identity.APNsCollapseID(cmd.NotificationID); err != nil {
			return nil, err
		}
	}
	body, err := json.Marshal(Payload{
		APS:    APS{Alert: Alert{Title: cmd.Title, Body: cmd.Body}, ThreadID: cmd.Type},
		Herald: Herald{ID: cmd.NotificationID, DeliveryID: cmd.DeliveryID, Type: cmd.Type, Data: cmd.Payload},
	})
	if err != nil {
		return nil, err
	}
	n := &apns2.Notification{
		ApnsID: apnsID, CollapseID: collapse, DeviceToken: cmd.Token, Topic: p.topic,
		Priority: p.priority, PushType: p.pushType, Payload: body,
	}
	if cmd.ExpiresAt > 0 {
		n.Expiration = time.UnixMilli(cmd.ExpiresAt)
	}
	return n, nil
}

// Send implements sinks.Provider.
func (p *Provider) Send(ctx context.Context, cmd *schemas.DeliveryCommand) sinks.Result {
	n, err := p.Notification(cmd)
	if err != nil {
		return sinks.Result{Class: sinks.Permanent, Rule: "bad_request", Reason: "unencodable", Err: err}
	}
	var ra retryAfterHolder
	ctx, wrote := sinks.TraceWrite(ctx)
	ctx = context.WithValue(ctx, retryAfterKey{}, &ra)
	resp, err := p.cl.PushWithContext(ctx, n)
	if err != nil {
		return sinks.NoAnswer(err, wrote.Load())
	}
	res := Classify(resp.StatusCode, resp.Reason)
	res.MessageID = resp.ApnsID
	res.RetryAfter = time.Duration(ra.v.Load())
	return res
}

// Classify is the table of the package doc for an HTTP answer.
func Classify(status int, reason string) sinks.Result {
	r := sinks.Result{Status: status, Reason: reason}
	if status == http.StatusOK {
		r.Class, r.Rule = sinks.Success, "accepted"
	} else if status == http.StatusBadRequest && (reason == apns2.ReasonBadDeviceToken || reason == apns2.ReasonDeviceTokenNotForTopic) {
		r.Class, r.Rule, r.RetireDevice = sinks.Permanent, "bad_device_token", true
	} else if status == http.StatusGone {
		r.Class, r.Rule, r.RetireDevice = sinks.Permanent, "unregistered", true
	} else if status == http.StatusForbidden {
		r.Class, r.Rule = sinks.Permanent, "auth"
	} else if status == http.StatusRequestEntityTooLarge || reason == apns2.ReasonPayloadTooLarge {
		r.Class, r.Rule = sinks.Permanent, "payload_too_large"
	} else if status == http.StatusBadRequest || status == http.StatusNotFound || status == http.StatusMethodNotAllowed {
		r.Class, r.Rule = sinks.Permanent, "bad_request"
	} else if status == http.StatusTooManyRequests {
		r.Class, r.Rule = sinks.Retryable, "too_many_requests"
	} else if status >= 500 {
		r.Class, r.Rule = sinks.Retryable, "http_5xx"
		if status == http.StatusInternalServerError {
			r.Rule = "server_error"
		} else if status == http.StatusServiceUnavailable {
			r.Rule = "unavailable"
		}
	} else {
		r.Class, r.Rule = sinks.Permanent, "http_4xx"
	}
	return r
}

// retryAfter is a RoundTripper that hands a response's Retry-After to the
// call that asked (apns2 does not expose response headers).
type retryAfter struct{ next http.RoundTripper }

type retryAfterKey struct{}

type retryAfterHolder struct{ v atomic.Int64 }

func (t *retryAfter) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.next.RoundTrip(req)
	if err == nil {
		if h, ok := req.Context().Value(retryAfterKey{}).(*retryAfterHolder); ok {
			h.v.Store(int64(sinks.ParseRetryAfter(resp.Header.Get("Retry-After"), time.Now())))
		}
	}
	return resp, err
}

// CloseIdleConnections closes the client's idle connections.
func (p *Provider) CloseIdleConnections() { p.cl.HTTPClient.CloseIdleConnections() }
