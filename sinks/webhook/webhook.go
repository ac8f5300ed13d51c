// Package webhook owns herald's outbound webhooks (NotifyKit's
// send.completed for HTTP users): a tenant registers endpoints
// (/v1/webhooks, stored on the compacted topic herald.webhooks, keyed
// tenant/id) with the events it wants, and herald delivers those events
// to them on the sink runtime (package sinks), signed per the Standard
// Webhooks specification. The event stream itself stays on
// herald.outcomes for Kafka users.
//
// The parts, run together by Run (`herald sink --channel webhook`, and
// inside herald dev):
//
//   - Table: the endpoints, read from herald.webhooks.
//   - the fan-out (NewFanOut), a stage on internal/stage: it consumes
//     herald.outcomes and, for each outcome of a push or feed delivery
//     (never of a webhook delivery, so webhooks never feed themselves),
//     writes one delivery command per event and subscribed endpoint of
//     the outcome's tenant on herald.deliveries.webhook, in one
//     transaction with its input offsets (Commands is the pure function).
//     An endpoint receives the events of outcomes at or after its
//     creation, once the fan-out's table has read it. It also forwards
//     the outcome to herald.completions for send.completed.
//   - the decisions forwarder (NewForwarder) and the completion stage
//     (NewCompletion): send.completed, one event per notification once
//     every delivery of it is final, exactly once (completion.go).
//   - the adapter (Provider), which the runtime calls: one signed POST per
//     attempt, classified. Retries, intents, the sent-set, dead letters
//     and the audit of every attempt are the runtime's.
//
// # Events
//
//	type                 when (one Outcome on herald.outcomes)
//	delivery.completed   every final state: delivered, failed, expired, device_retired
//	delivery.failed      failed (permanent error or retries exhausted; dead-lettered) or expired
//	device.retired       device_retired: a provider invalidated the token, herald disabled the device
//	send.completed       every delivery of a notification ended (completion.go), once per notification
//
// The first three are per-delivery events (one push to one device, or one
// feed item); send.completed is per notification: {"type", "timestamp",
// "data": {eventId, notificationId, notificationType, recipient, status
// (delivered, partially_delivered, failed, skipped), decision, detail,
// channels (channel → final status → count, "skipped" for an opted-out
// channel), deliveries, completedAt}}, webhook-id "msg_" +
// identity.WebhookEventID(notification id, "send.completed"). A
// per-delivery event's body is
// {"type", "timestamp" (the outcome's time), "data": {eventId, deliveryId,
// notificationId, notificationType, recipient, deviceId, channel, status,
// reason, attempts, at}}, built once by the fan-out and sent byte for
// byte on every attempt.
//
// # Signature (Standard Webhooks 1.0, symmetric)
//
//	webhook-id         "msg_" + identity.WebhookEventID(delivery id, event type): the same for every
//	                   endpoint and every retry, so receivers dedupe on it (the command's CollapseID)
//	webhook-timestamp  the attempt's time, integer Unix seconds (a retry is re-signed with its own)
//	webhook-signature  "v1," + base64(HMAC-SHA256(key, id "." timestamp "." body)), key = the
//	                   base64-decoded part of the endpoint's "whsec_" secret
//
// # Classification (the specification's "delivery success and failure")
//
//	answer                                   class       rule
//	2xx                                      success     accepted
//	410 Gone                                 permanent   gone (disables the endpoint: outcome
//	                                                     device_retired, the endpoint's record
//	                                                     rewritten with enabled=false)
//	429                                      retryable   too_many_requests (Retry-After honoured)
//	5xx                                      retryable   server_error (Retry-After honoured)
//	3xx (redirects are never followed)       retryable   redirect
//	other 4xx                                retryable   rejected (a receiver's bug or a rotated
//	                                                     secret: the spec treats it as a failure
//	                                                     to retry; MaxAttempts bounds it)
//	-  endpoint deleted since the fan-out    permanent   endpoint_deleted
//	-  endpoint disabled                     permanent   endpoint_disabled
//	-  secret unusable                       permanent   bad_secret
//	-  the endpoint's address is forbidden   permanent   forbidden_address (see Hazards)
//	-  connection refused, timeout before    retryable   not_sent
//	   the request headers were written
//	-  timeout, reset or EOF after they      ambiguous   no_answer (retried with the same webhook-id)
//	   were written
//
// Retries follow the sink's policy (--max-attempts, --backoff-*,
// --max-age: the specification suggests days of retries; set --max-age
// accordingly for this channel).
//
// Hazards: the fan-out reads the endpoints from its table, which lags
// herald.webhooks by a moment: an endpoint registered that moment before
// an outcome may miss its event, and one deleted may still get events
// written (the adapter then ends them as endpoint_deleted). The endpoint
// URL is called from herald's network (SSRF). Unless AllowPrivate is set
// (`--webhook-allow-private`, HERALD_WEBHOOK_ALLOW_PRIVATE, on both
// `herald api` and `herald sink`; herald dev sets it for its loopback
// receiver), herald refuses private, loopback, link-local and other
// special-purpose addresses (Forbidden) twice: the API refuses an
// endpoint URL that is, or resolves to, one (422, field url; CheckURL),
// and the adapter's dialer refuses every connection to one after DNS
// resolution (a net.Dialer Control), so a name re-pointed at an internal
// address after registration (DNS rebinding) still gets nowhere: the
// delivery ends permanent, forbidden_address. A connection to a proxy
// named by HTTP_PROXY/HTTPS_PROXY is not checked; the proxy then must
// refuse internal addresses itself, as the specification advises.
package webhook

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldhq/herald/schemas"
	"github.com/heraldhq/herald/sinks"
	"github.com/heraldhq/herald/topics"
)

// Channel is the webhook channel's name.
const Channel = topics.Webhook

// Endpoints finds a tenant's endpoint (Table implements it).
type Endpoints interface {
	Endpoint(tenant, id string) (schemas.Webhook, bool)
}

// Config configures the adapter.
type Config struct {
	Endpoints Endpoints
	// Topic is herald.webhooks' full name, where a 410 disables the
	// endpoint.
	Topic string
	// Client makes the calls; by default one that never follows
	// redirects (the call's context bounds it) and, without AllowPrivate,
	// refuses to connect to a forbidden address (Dialer).
	Client *http.Client
	// AllowPrivate lets the default client call endpoints at private,
	// loopback and link-local addresses (herald dev's local receiver,
	// tests). Off in production: `herald sink --webhook-allow-private`.
	AllowPrivate bool
	// Now is the clock of webhook-timestamp (time.Now by default).
	Now func() time.Time
}

// Provider delivers one signed webhook per call.
type Provider struct {
	c  Config
	tr *http.Transport
}

// New builds the adapter.
func New(c Config) (*Provider, error) {
	if c.Endpoints == nil || c.Topic == "" {
		return nil, errors.New("webhook: Endpoints and Topic are required")
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	p := &Provider{c: c}
	if c.Client == nil {
		p.tr = &http.Transport{Proxy: http.ProxyFromEnvironment, DialContext: Dialer(c.AllowPrivate, proxyAddrs()...), ForceAttemptHTTP2: true, MaxIdleConnsPerHost: 16, IdleConnTimeout: 90 * time.Second}
		p.c.Client = &http.Client{Transport: p.tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
	return p, nil
}

// CloseIdleConnections closes the default client's idle connections.
func (p *Provider) CloseIdleConnections() {
	if p.tr != nil {
		p.tr.CloseIdleConnections()
	}
}

// Send implements sinks.Provider: the command's endpoint is DeviceID, its
// webhook-id CollapseID, its body Payload.
func (p *Provider) Send(ctx context.Context, cmd *schemas.DeliveryCommand) sinks.Result {
	ep, ok := p.c.Endpoints.Endpoint(cmd.Tenant, cmd.DeviceID)
	if !ok {
		return sinks.Result{Class: sinks.Permanent, Rule: "endpoint_deleted"}
	} else if !ep.Enabled {
		return sinks.Result{Class: sinks.Permanent, Rule: "endpoint_disabled", Reason: ep.DisabledReason}
	}
	key, err := SecretKey(ep.Secret)
	if err != nil {
		return sinks.Result{Class: sinks.Permanent, Rule: "bad_secret", Err: err}
	}
	ts := p.c.Now().Unix()
	ctx, wrote := sinks.TraceWrite(ctx)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, ep.URL, bytes.NewReader(cmd.Payload))
	if err != nil {
		return sinks.Result{Class: sinks.Permanent, Rule: "bad_url", Err: err}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "herald-webhooks/1")
	req.Header.Set(HeaderID, cmd.CollapseID)
	req.Header.Set(HeaderTimestamp, strconv.FormatInt(ts, 10))
	req.Header.Set(HeaderSignature, Sign(key, cmd.CollapseID, ts, cmd.Payload))
	resp, err := p.c.Client.Do(req)
	if errors.Is(err, ErrForbiddenAddress) {
		return sinks.Result{Class: sinks.Permanent, Rule: "forbidden_address", Reason: "the endpoint's address is private, loopback or link-local", Err: err}
	} else if err != nil {
		return sinks.NoAnswer(err, wrote.Load())
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	res := Classify(resp.StatusCode)
	res.RetryAfter = sinks.ParseRetryAfter(resp.Header.Get("Retry-After"), time.Now())
	return res
}

// Classify is the table of the package doc for an HTTP answer.
func Classify(status int) sinks.Result {
	r := sinks.Result{Status: status, Reason: http.StatusText(status)}
	if status >= 200 && status < 300 {
		r.Class, r.Rule, r.Reason = sinks.Success, "accepted", ""
	} else if status == http.StatusGone {
		r.Class, r.Rule, r.RetireDevice = sinks.Permanent, "gone", true
	} else if status == http.StatusTooManyRequests {
		r.Class, r.Rule = sinks.Retryable, "too_many_requests"
	} else if status >= 500 {
		r.Class, r.Rule = sinks.Retryable, "server_error"
	} else if status >= 300 && status < 400 {
		r.Class, r.Rule = sinks.Retryable, "redirect"
	} else {
		r.Class, r.Rule = sinks.Retryable, "rejected"
	}
	return r
}

// Retire implements sinks.Retirer: a 410 disables the endpoint (its
// record rewritten with enabled=false and the reason), in the transaction
// of the delivery's outcome. An endpoint already deleted stays deleted.
func (p *Provider) Retire(cmd *schemas.DeliveryCommand, reason string, now time.Time) []*kgo.Record {
	ep, ok := p.c.Endpoints.Endpoint(cmd.Tenant, cmd.DeviceID)
	if !ok {
		return nil
	}
	ep.Enabled, ep.DisabledReason, ep.UpdatedAt = false, reason, now.UnixMilli()
	b, err := schemas.Encode(&ep)
	if err != nil {
		return nil // cannot happen: a decoded endpoint encodes
	}
	return []*kgo.Record{{Topic: p.c.Topic, Key: []byte(Key(ep.Tenant, ep.ID)), Value: b,
		Headers: []kgo.RecordHeader{{Key: schemas.HeaderSchema, Value: []byte(ep.SchemaName())}}}}
}
