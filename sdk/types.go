package sdk

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/heraldhq/herald/identity"
	"github.com/heraldhq/herald/schemas"
)

// Notification is one logical send: a notification of one type to one or
// more recipients, each of whom gets a notification of their own with its
// own id. It is the body of POST /v1/notifications.
type Notification struct {
	// Type names what the notification is about, e.g. "invoice.paid".
	Type string `json:"type"`
	// Recipients are user ids; or set Target instead.
	Recipients []string `json:"recipients,omitempty"`
	Target     *Target  `json:"target,omitempty"`
	Title      string   `json:"title"`
	Body       string   `json:"body"`
	// Payload is a JSON object handed to the device with the notification.
	Payload  json.RawMessage `json:"payload,omitempty"`
	Locale   string          `json:"locale,omitempty"`
	Channels []string        `json:"channels,omitempty"`
	// Key makes the id the canonical NotificationID(type, recipient, key)
	// when there is neither a DedupeKey nor an IdempotencyKey.
	Key            Key    `json:"key,omitempty"`
	DedupeKey      string `json:"dedupeKey,omitempty"`
	DedupeWindowMs int64  `json:"dedupeWindowMs,omitempty"`
	// IdempotencyKey names this logical send. Client sets one when empty.
	IdempotencyKey string `json:"idempotencyKey,omitempty"`
}

// Target kinds. TargetUser needs UserID; TargetDevice needs DeviceID
// (UserID optional, checked); TargetTag needs Tag (every user with an
// enabled device carrying it); TargetSegment needs Segment (the members of a
// segment set with PUT /v1/segments/{name}); TargetAll reaches every user of
// the tenant with an enabled device. A tag, segment or all send is one
// notification addressed to the group (recipient "@tag:<tag>",
// "@segment:<name>" or "@all"); the route stage, which holds the devices
// and segments, resolves it when it routes it and writes one notification
// per member (listed in the group notification's timeline).
const (
	TargetUser    = "user"
	TargetDevice  = "device"
	TargetTag     = "tag"
	TargetSegment = "segment"
	TargetAll     = "all"
)

// Target addresses a notification other than by a list of recipients.
type Target struct {
	Kind     string `json:"kind"`
	UserID   string `json:"userId,omitempty"`
	DeviceID string `json:"deviceId,omitempty"`
	Tag      string `json:"tag,omitempty"`
	Segment  string `json:"segment,omitempty"`
}

// RequestOptions are the parts of a request record that are not the
// notification's: who sends it and when.
type RequestOptions struct {
	// RequestID names the call; a fresh random id when empty. All the
	// records of one call share it.
	RequestID string
	Tenant    string
	// Producer names the calling service (never a secret).
	Producer string
	// Source is "api" or "sdk".
	Source string
	// Now is the request's creation time; time.Now when zero.
	Now time.Time
}

// Requests returns the request records of n for the given
// recipients, one per recipient, in order, each with its id from
// [DeriveID]. It checks what the records need (a type, a title, a body,
// recipients, a valid key and payload), not the HTTP API's limits.
func (n Notification) Requests(recipients []string, o RequestOptions) ([]schemas.Request, error) {
	switch {
	case o.Tenant == "":
		return nil, errors.New("sdk: tenant is empty")
	case n.Type == "":
		return nil, errors.New("sdk: type is empty")
	case n.Title == "" || n.Body == "":
		return nil, errors.New("sdk: title and body are required")
	case len(recipients) == 0:
		return nil, errors.New("sdk: no recipients")
	case n.DedupeWindowMs < 0:
		return nil, errors.New("sdk: dedupeWindowMs is negative")
	}
	if len(n.Payload) > 0 && !json.Valid(n.Payload) {
		return nil, errors.New("sdk: payload is not valid JSON")
	}
	if o.RequestID == "" {
		o.RequestID = identity.NewRandomID()
	}
	if o.Now.IsZero() {
		o.Now = time.Now()
	}
	var keyJSON json.RawMessage
	if n.Key != nil {
		b, err := n.Key.MarshalJSON()
		if err != nil {
			return nil, fmt.Errorf("sdk: key: %w", err)
		}
		keyJSON = b
	}
	out := make([]schemas.Request, 0, len(recipients))
	for _, r := range recipients {
		if r == "" {
			return nil, errors.New("sdk: empty recipient")
		}
		id, src, err := deriveID(o.Tenant, n.Type, r, keyJSON, n.DedupeKey, n.IdempotencyKey)
		if err != nil {
			return nil, fmt.Errorf("sdk: id of recipient %q: %w", r, err)
		}
		out = append(out, schemas.Request{
			RequestID: o.RequestID, Tenant: o.Tenant, Type: n.Type, Recipient: r,
			NotificationID: id, IDSource: src, Key: keyJSON,
			DedupeKey: n.DedupeKey, DedupeWindowMs: n.DedupeWindowMs, IdempotencyKey: n.IdempotencyKey,
			Title: n.Title, Body: n.Body, Payload: n.Payload, Locale: n.Locale, Channels: n.Channels,
			Producer: o.Producer, Source: o.Source, CreatedAt: o.Now.UnixMilli(),
		})
	}
	return out, nil
}

// Notification statuses in a SendResult: the pipeline's decision so far.
const (
	// StatusPending: durably in Kafka, not decided yet (or not waited for).
	StatusPending = "pending"
)

// Statuses a NotificationRecord moves through after the dedupe stage
// accepted it (besides pending, accepted and the stages' skip outcomes):
// routed (deliveries made, some not final yet), then delivered (every
// delivery), partially_delivered (some), failed (none) or expired (none:
// every delivery expired).
const (
	StatusRouted             = "routed"
	StatusDelivered          = "delivered"
	StatusPartiallyDelivered = "partially_delivered"
	StatusFailed             = "failed"
	StatusExpired            = "expired"
)

// SendResult is the answer to POST /v1/notifications (202 Accepted).
type SendResult struct {
	// RequestID names the call that created the notifications: on an
	// idempotent replay, the original call's.
	RequestID     string               `json:"requestId"`
	Notifications []NotificationStatus `json:"notifications"`
	// Deliveries and Skipped are NotifyKit's shape: the route stage's
	// deliveries (each push and the feed item, queued or deferred) and the
	// notifications skipped, as decided within the wait. Deliveries is
	// empty unless the send asked to wait (Prefer: wait) and the server
	// waits for the route stage, and on an idempotent replay, which the
	// route stage never sees; Client.Notification shows them.
	Deliveries []Delivery `json:"deliveries"`
	Skipped    []Skipped  `json:"skipped"`
	// Replayed is true when the API answered with Idempotency-Replayed:
	// true (not part of the body).
	Replayed bool `json:"-"`
}

// NotificationStatus is one recipient's notification in a SendResult.
type NotificationStatus struct {
	ID        string `json:"id"`
	Recipient string `json:"recipient"`
	// Status is "pending", or the dedupe stage's outcome: "accepted",
	// "duplicate", "rejected".
	Status string `json:"status"`
}

// Delivery is one push of a notification to one device.
type Delivery struct {
	NotificationID string `json:"notificationId"`
	DeliveryID     string `json:"deliveryId"`
	DeviceID       string `json:"deviceId"`
	Channel        string `json:"channel"`
	Status         string `json:"status"`
}

// Skipped is a notification the pipeline decided not to send, and why
// (a skip reason: "duplicate", "rejected", later "rate_limited",
// "opted_out", ...).
type Skipped struct {
	NotificationID string `json:"notificationId"`
	Recipient      string `json:"recipient"`
	Reason         string `json:"reason"`
}

// Explanation is the answer to POST /v1/explain: what the dedupe stage
// would decide for a send now, from the API's replica of its seen-set
// (eventually consistent), changing nothing.
type Explanation struct {
	WouldDeduplicate bool `json:"wouldDeduplicate"`
	WouldReplay      bool `json:"wouldReplay"`
	WouldConflict    bool `json:"wouldConflict"`
	WouldRateLimit   bool `json:"wouldRateLimit"`
	WouldDigest      bool `json:"wouldDigest"`
	WouldDefer       bool `json:"wouldDefer"`
	// WouldFallback: a notification's type has a fallback chain whose
	// later steps have a target (ExplainedNotification.Fallback).
	WouldFallback bool                    `json:"wouldFallback"`
	Consistency   string                  `json:"consistency"`
	Notifications []ExplainedNotification `json:"notifications"`
}

// ExplainedNotification is one recipient's part of an Explanation.
type ExplainedNotification struct {
	ID                     string `json:"id"`
	Recipient              string `json:"recipient"`
	IDSource               string `json:"idSource"`
	Outcome                string `json:"outcome"`
	WouldDeduplicate       bool   `json:"wouldDeduplicate"`
	WouldReplay            bool   `json:"wouldReplay"`
	WouldConflict          bool   `json:"wouldConflict"`
	OriginalRequestID      string `json:"originalRequestId,omitempty"`
	OriginalNotificationID string `json:"originalNotificationId,omitempty"`
	OriginalAt             int64  `json:"originalAt,omitempty"`
	// The route stage's part, for a notification dedupe would accept:
	// its decision (routed, rate_limited, digested, deferred, opted_out,
	// no_target), when deferred pushes would go (ms), and the channels and
	// devices it would reach.
	RouteOutcome string `json:"routeOutcome,omitempty"`
	// RouteDetail is the route stage's decision in words; for a tag,
	// segment or all target, the members it would reach and their
	// notification ids.
	RouteDetail    string            `json:"routeDetail,omitempty"`
	WouldRateLimit bool              `json:"wouldRateLimit"`
	WouldDigest    bool              `json:"wouldDigest"`
	WouldDefer     bool              `json:"wouldDefer"`
	DeferUntil     int64             `json:"deferUntil,omitempty"`
	Channels       []string          `json:"channels,omitempty"`
	Devices        []ExplainedDevice `json:"devices,omitempty"`
	// WouldFallback and Fallback: the later steps of the type's fallback
	// chain, each sent only if its condition holds (Channels and Devices
	// are the first step's, sent now).
	WouldFallback bool                    `json:"wouldFallback"`
	Fallback      []ExplainedFallbackStep `json:"fallback,omitempty"`
}

// ExplainedFallbackStep is one later step of a fallback chain: its number
// in the chain (the first step is 1), its channels, its condition as the
// chain's text writes it ("email if failed", "email after 15m0s unless
// displayed|opened") and the devices it would reach.
type ExplainedFallbackStep struct {
	Step     int               `json:"step"`
	Channels []string          `json:"channels"`
	When     string            `json:"when"`
	Devices  []ExplainedDevice `json:"devices,omitempty"`
}

// ExplainedDevice is one push an explained notification would make.
type ExplainedDevice struct {
	Channel  string `json:"channel"`
	DeviceID string `json:"deviceId"`
}

// NotificationRecord is the answer to GET /v1/notifications/{id}: the
// notification's first request and its timeline so far.
type NotificationRecord struct {
	ID             string          `json:"id"`
	Type           string          `json:"type"`
	Recipient      string          `json:"recipient"`
	Title          string          `json:"title"`
	Body           string          `json:"body"`
	Payload        json.RawMessage `json:"payload,omitempty"`
	Locale         string          `json:"locale,omitempty"`
	Channels       []string        `json:"channels,omitempty"`
	DedupeKey      string          `json:"dedupeKey,omitempty"`
	IdempotencyKey string          `json:"idempotencyKey,omitempty"`
	IDSource       string          `json:"idSource"`
	RequestID      string          `json:"requestId"`
	Producer       string          `json:"producer,omitempty"`
	Source         string          `json:"source"`
	CreatedAt      int64           `json:"createdAt"`
	// Status moves with the pipeline: pending, then the dedupe decision
	// about the first request (accepted, or why not), then routed (or the
	// route stage's skip), then delivered, partially_delivered, failed or
	// expired once every delivery has its final outcome (see the Status*
	// constants).
	Status   string          `json:"status"`
	Timeline []TimelineEvent `json:"timeline"`
}

// Timeline event kinds.
const (
	EventRequested = "requested"
	EventDecision  = "decision"
	EventAttempt   = "attempt"
	EventOutcome   = "outcome"
	// EventReceipt: what the device reported (Receipt: displayed, opened,
	// dropped), apart from the provider's acceptance (EventAttempt).
	EventReceipt = "receipt"
)

// TimelineEvent is one step in a notification's history: a request
// ("requested"), a stage's decision ("decision"), a sink's call to a
// provider for one device ("attempt"), a delivery's final state
// ("outcome") or what the device reported ("receipt").
type TimelineEvent struct {
	// At is when it happened, RFC 3339 in UTC to the millisecond, as the
	// dashboard and herald audit timeline show it.
	At   time.Time `json:"at"`
	Kind string    `json:"kind"`
	// RequestID is set on requested and decision events; attempts and
	// outcomes belong to a delivery, named by DeliveryID.
	RequestID         string `json:"requestId,omitempty"`
	Stage             string `json:"stage,omitempty"`
	Outcome           string `json:"outcome,omitempty"`
	Detail            string `json:"detail,omitempty"`
	OriginalRequestID string `json:"originalRequestId,omitempty"`
	Producer          string `json:"producer,omitempty"`
	// DeliveryID, Channel and DeviceID name the delivery of an attempt or
	// an outcome.
	DeliveryID string `json:"deliveryId,omitempty"`
	Channel    string `json:"channel,omitempty"`
	DeviceID   string `json:"deviceId,omitempty"`
	// Attempt is an attempt's number (from 1) and Result its classified
	// result: sent, retryable, permanent or ambiguous; Classification
	// refines it (e.g. "throttled").
	Attempt        int    `json:"attempt,omitempty"`
	Result         string `json:"result,omitempty"`
	Classification string `json:"classification,omitempty"`
	// Status is an outcome's final state: delivered, dead_lettered or
	// device_retired, after Attempts attempts.
	Status   string `json:"status,omitempty"`
	Attempts int    `json:"attempts,omitempty"`
	// Reason is the provider's reason on an attempt, the outcome's reason
	// on an outcome.
	Reason string `json:"reason,omitempty"`
	// Receipt is what the device reported on a receipt event: displayed,
	// opened, or dropped (its seen-set dropped a repeat); ReceiptID names
	// it (one per delivery and kind: a receipt sent twice shows once).
	Receipt   string `json:"receipt,omitempty"`
	ReceiptID string `json:"receiptId,omitempty"`
}

// Platforms of a device.
const (
	PlatformIOS     = "ios"
	PlatformAndroid = "android"
	PlatformWeb     = "web"
	// PlatformEmail is a registered email address (Email), delivered on
	// the email channel.
	PlatformEmail = "email"
)

// WebPushSubscription is a browser's PushSubscription, as the device
// records on herald.devices hold it.
type WebPushSubscription = schemas.WebPushSubscription

// DeviceRegistration is the body of PUT /v1/users/{userId}/devices/{deviceId}:
// a new device, or a new token for a known one.
type DeviceRegistration struct {
	Platform string               `json:"platform"`
	Token    string               `json:"token,omitempty"`
	WebPush  *WebPushSubscription `json:"webPush,omitempty"`
	// Email is the address of an email device (platform email, which
	// may then be omitted).
	Email    string `json:"email,omitempty"`
	Locale   string `json:"locale,omitempty"`
	TimeZone string `json:"timeZone,omitempty"`
	// Enabled is true when omitted.
	Enabled *bool `json:"enabled,omitempty"`
	// Tags label the device for target kind tag (at most 64, distinct).
	Tags []string `json:"tags,omitempty"`
}

// Device is a registered device of a user.
type Device struct {
	UserID   string               `json:"userId"`
	DeviceID string               `json:"deviceId"`
	Platform string               `json:"platform"`
	Token    string               `json:"token,omitempty"`
	WebPush  *WebPushSubscription `json:"webPush,omitempty"`
	// Email is the address of an email device.
	Email     string   `json:"email,omitempty"`
	Locale    string   `json:"locale,omitempty"`
	TimeZone  string   `json:"timeZone,omitempty"`
	Enabled   bool     `json:"enabled"`
	Tags      []string `json:"tags,omitempty"`
	CreatedAt int64    `json:"createdAt"`
	UpdatedAt int64    `json:"updatedAt"`
	// ReceiptToken is answered once, by the registration (PUT) of a web
	// device: the device's bearer token for POST /v1/receipts and PUT
	// /v1/device/webpush. herald keeps only its hash; registering the
	// device again issues a new one and the old one stops working.
	ReceiptToken string `json:"receiptToken,omitempty"`
}

// Receipt kinds a device reports (POST /v1/receipts): the kinds of the
// herald.receipt records the API writes.
const (
	ReceiptDisplayed = schemas.ReceiptDisplayed
	ReceiptOpened    = schemas.ReceiptOpened
	ReceiptDropped   = schemas.ReceiptDropped
)

// ReceiptResult is the answer to POST /v1/receipts: the receipt's id, the
// same for the same notification, device and kind however often it is
// sent, and the delivery it is about.
type ReceiptResult struct {
	ReceiptID  string `json:"receiptId"`
	DeliveryID string `json:"deliveryId"`
}

// DeviceList is the answer to GET /v1/users/{userId}/devices.
type DeviceList struct {
	Devices []Device `json:"devices"`
}

// QuietHours defers push channels between Start and End ("HH:MM") in
// TimeZone (an IANA name).
type QuietHours struct {
	Start    string `json:"start"`
	End      string `json:"end"`
	TimeZone string `json:"timeZone"`
}

// PreferencesUpdate is the body of PUT /v1/users/{userId}/preferences: it
// replaces the user's preferences.
type PreferencesUpdate struct {
	// Channels maps a channel (apns, fcm, webpush, feed) to whether the
	// user accepts it; a channel not listed is accepted.
	Channels      map[string]bool `json:"channels,omitempty"`
	OptedOutTypes []string        `json:"optedOutTypes,omitempty"`
	QuietHours    *QuietHours     `json:"quietHours,omitempty"`
}

// Preferences are a user's channel choices.
type Preferences struct {
	UserID        string          `json:"userId"`
	Channels      map[string]bool `json:"channels"`
	OptedOutTypes []string        `json:"optedOutTypes"`
	QuietHours    *QuietHours     `json:"quietHours,omitempty"`
	UpdatedAt     int64           `json:"updatedAt"`
}

// SegmentUpdate is the body of PUT /v1/segments/{name}: it replaces the
// segment's members (user ids, distinct).
type SegmentUpdate struct {
	Members []string `json:"members"`
}

// Segment is a tenant's named set of users, the recipients of a send to
// target kind segment.
type Segment struct {
	Name      string   `json:"name"`
	Members   []string `json:"members"`
	UpdatedAt int64    `json:"updatedAt"`
}

// WebhookUpdate registers or replaces an outbound webhook endpoint
// (PUT /v1/webhooks/{webhookId}). Events: delivery.completed,
// delivery.failed, device.retired, send.completed. Secret ("whsec_" and base64) is made
// by herald when empty (an existing endpoint keeps its own).
type WebhookUpdate struct {
	URL     string   `json:"url"`
	Events  []string `json:"events"`
	Secret  string   `json:"secret,omitempty"`
	Enabled *bool    `json:"enabled,omitempty"`
}

// Webhook is a tenant's outbound webhook endpoint. Secret verifies the
// Standard Webhooks signature of every delivery; herald answers it only
// when it creates the endpoint (empty otherwise: keep it then).
type Webhook struct {
	ID     string   `json:"id"`
	URL    string   `json:"url"`
	Secret string   `json:"secret,omitempty"`
	Events []string `json:"events"`
	// Enabled is false when the tenant disabled it or it answered 410
	// (DisabledReason says so).
	Enabled        bool   `json:"enabled"`
	DisabledReason string `json:"disabledReason,omitempty"`
	CreatedAt      int64  `json:"createdAt"`
	UpdatedAt      int64  `json:"updatedAt"`
}

// WebhookList is a tenant's endpoints (GET /v1/webhooks), sorted by id.
type WebhookList struct {
	Webhooks []Webhook `json:"webhooks"`
}

// Problem is an RFC 9457 problem details body (application/problem+json),
// with herald's extensions.
type Problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail,omitempty"`
	// Errors names each offending field of the request.
	Errors []FieldError `json:"errors,omitempty"`
	// OriginalRequestID is set on an idempotency conflict.
	OriginalRequestID string `json:"originalRequestId,omitempty"`
	// Notifications is set on an idempotency conflict: what each
	// recipient's notification got.
	Notifications []NotificationStatus `json:"notifications,omitempty"`
}

// FieldError names one offending field, as a JSON pointer-like dotted path
// ("recipients[2]", "target.kind") or a header ("header:Idempotency-Key").
type FieldError struct {
	Field   string `json:"field"`
	Message string `json:"message"`
}
