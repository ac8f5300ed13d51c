package api

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/heraldhq/herald/identity"
	"github.com/heraldhq/herald/schemas"
	"github.com/heraldhq/herald/sdk"
)

// Receipt tokens. A web device's registration (PUT
// /v1/users/{userId}/devices/{deviceId}) answers a fresh receipt token once,
// in receiptToken; herald keeps only its SHA-256 in the device record, and
// a new registration of the device replaces it (the old token stops
// working). The token authenticates the device's own calls, POST
// /v1/receipts and PUT /v1/device/webpush, which a browser makes without an
// API key.
//
// Form: "hrt1." + base64url(DeviceKey) + "." + base64url(32 random bytes).
// The device key in the middle only finds the device; the hash of the whole
// token, compared in constant time, is what authenticates it.
const receiptTokenPrefix = "hrt1."

// newReceiptToken returns a fresh token for the device and its hex SHA-256.
func newReceiptToken(tenant, user, device string) (token, hash string) {
	var secret [32]byte
	rand.Read(secret[:]) // never fails (crypto/rand)
	token = receiptTokenPrefix + base64.RawURLEncoding.EncodeToString([]byte(schemas.DeviceKey(tenant, user, device))) +
		"." + base64.RawURLEncoding.EncodeToString(secret[:])
	return token, hashToken(token)
}

func hashToken(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

// deviceOfToken reads the device key a receipt token names: tenant, user
// and device ids.
func deviceOfToken(token string) (tenant, user, device string, ok bool) {
	rest, found := strings.CutPrefix(token, receiptTokenPrefix)
	if !found {
		return "", "", "", false
	}
	keyPart, _, found := strings.Cut(rest, ".")
	if !found {
		return "", "", "", false
	}
	key, err := base64.RawURLEncoding.DecodeString(keyPart)
	if err != nil {
		return "", "", "", false
	}
	parts := strings.Split(string(key), "/")
	if len(parts) != 3 {
		return "", "", "", false
	}
	for i, p := range parts {
		if parts[i], err = url.PathUnescape(p); err != nil || parts[i] == "" {
			return "", "", "", false
		}
	}
	return parts[0], parts[1], parts[2], true
}

// deviceAuth authenticates a call by a device's receipt token ("Bearer
// <token>") and returns the device. It answers 401 when the token is
// missing, malformed, or not the device's current one (a device registered
// again has a new token), and 503 while the device replica loads.
func (s *Server) deviceAuth(w http.ResponseWriter, r *http.Request) (schemas.Device, bool) {
	scheme, token, _ := strings.Cut(r.Header.Get("Authorization"), " ")
	token = strings.TrimSpace(token)
	tenant, user, device, ok := deviceOfToken(token)
	if !strings.EqualFold(scheme, "Bearer") || !ok {
		writeProblem(w, deviceUnauthorized())
		return schemas.Device{}, false
	}
	if !s.replicaReady(w) {
		return schemas.Device{}, false
	}
	d, found := s.rep.device(tenant, user, device)
	want := d.ReceiptTokenSHA256
	if !found || want == "" || subtle.ConstantTimeCompare([]byte(hashToken(token)), []byte(want)) != 1 {
		writeProblem(w, deviceUnauthorized())
		return schemas.Device{}, false
	}
	return d, true
}

func deviceUnauthorized() *problem {
	p := newProblem(http.StatusUnauthorized, probUnauthorized, "Unauthorized",
		"send the device's receipt token (from its registration) as 'Authorization: Bearer <token>'")
	p.header = http.Header{"Www-Authenticate": {`Bearer realm="herald-device"`}}
	return p
}

// postReceipt records what a web device reports about a notification:
// displayed, opened, or a repeat its seen-set dropped. The receipt goes to
// herald.receipts keyed by its delivery id (the push of the notification's
// occurrence to this device), with ReceiptID = identity.ReceiptID(delivery id, kind): a
// receipt sent again carries the same id and the audit counts it once.
// 202 once it is durably in Kafka.
func (s *Server) postReceipt(w http.ResponseWriter, r *http.Request, _ principal) {
	d, ok := s.deviceAuth(w, r) // first: a caller without a device's token learns nothing of the body's rules
	if !ok {
		return
	}
	f, ok := s.readObject(w, r)
	if !ok {
		return
	}
	nid := f.text("notificationId", true, identity.IDLen)
	if nid != "" && !identity.Valid(nid) {
		f.fail("notificationId", "must be a herald id (32 lower-case hex characters)")
	}
	occurrence := f.text("occurrenceId", false, identity.IDLen)
	if occurrence != "" && !identity.Valid(occurrence) {
		f.fail("occurrenceId", "must be a herald id (32 lower-case hex characters)")
	}
	kind := f.text("kind", true, 16)
	switch kind {
	case "", schemas.ReceiptDisplayed, schemas.ReceiptOpened, schemas.ReceiptDropped:
	default:
		f.fail("kind", "must be displayed, opened or dropped")
	}
	typ := f.text("type", false, maxIDLen)
	clientAt, _ := f.integer("at", 1<<53)
	if !f.valid(w) {
		return
	}
	now := time.Now()
	// The push's delivery id: from its occurrence (the payload's
	// occurrenceId), or from the notification id for a notification
	// accepted before occurrences existed.
	did := identity.DeliveryID(schemas.Occurrence(nid, occurrence), d.DeviceID)
	rc := schemas.Receipt{ReceiptID: identity.ReceiptID(did, kind), Kind: kind, DeliveryID: did, NotificationID: nid,
		Tenant: d.Tenant, Type: typ, Recipient: d.Recipient, DeviceID: d.DeviceID, Channel: "webpush", At: now.UnixMilli(), ClientAt: clientAt}
	b, err := schemas.Encode(&rc)
	if err != nil {
		writeProblem(w, invalid(err.Error()))
		return
	}
	rec := &kgo.Record{Topic: s.receiptsT, Key: []byte(did), Value: b, Timestamp: now,
		Headers: []kgo.RecordHeader{{Key: schemas.HeaderSchema, Value: []byte(rc.SchemaName())}}}
	if err := s.w.write(r.Context(), []*kgo.Record{rec}); err != nil {
		s.log.Warn("receipt not written", "err", err)
		writeProblem(w, unavailable("the receipt was not written; retry", 1))
		return
	}
	writeJSON(w, http.StatusAccepted, sdk.ReceiptResult{ReceiptID: rc.ReceiptID, DeliveryID: did})
}

// putDeviceWebPush replaces the calling device's push subscription (the
// service worker's pushsubscriptionchange: the browser replaced the
// subscription, and the worker has no API key). Everything else about the
// device, its receipt token included, stays.
func (s *Server) putDeviceWebPush(w http.ResponseWriter, r *http.Request, _ principal) {
	d, ok := s.deviceAuth(w, r) // first, as postReceipt
	if !ok {
		return
	}
	f, ok := s.readObject(w, r)
	if !ok {
		return
	}
	sub := &schemas.WebPushSubscription{
		Endpoint: f.text("endpoint", true, 2048),
		P256dh:   f.text("p256dh", true, 256),
		Auth:     f.text("auth", true, 256),
	}
	if sub.Endpoint != "" && !strings.HasPrefix(sub.Endpoint, "https://") {
		f.fail("endpoint", "must be an https URL")
	}
	if !f.valid(w) {
		return
	}
	if d.Platform != sdk.PlatformWeb {
		writeProblem(w, invalid("only a web device has a push subscription", sdk.FieldError{Field: "endpoint", Message: "the device is not a web device"}))
		return
	}
	d.WebPush = sub
	d.UpdatedAt = time.Now().UnixMilli()
	key := schemas.DeviceKey(d.Tenant, d.Recipient, d.DeviceID)
	if !s.put(w, r, s.devicesT, key, d) {
		return
	}
	s.rep.putDevice(key, &d)
	writeJSON(w, http.StatusOK, deviceOut(d))
}

// deviceRoutes are called by browsers, from any origin (the page and its
// service worker live on the application's site, herald elsewhere): they
// answer CORS preflights and allow any origin. They carry no cookies, only
// the device's bearer token, so allowing any origin grants nothing a
// token holder does not already have.
var deviceRoutes = []string{"/v1/receipts", "/v1/device/webpush", "/v1/webpush/vapid-public-key"}

// cors sets the CORS headers of the device routes and answers their
// preflight; it reports whether the request was a preflight (answered).
func cors(w http.ResponseWriter, r *http.Request) bool {
	for _, p := range deviceRoutes {
		if r.URL.Path != p {
			continue
		}
		h := w.Header()
		h.Set("Access-Control-Allow-Origin", "*")
		if r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != "" {
			h.Set("Access-Control-Allow-Methods", "GET, POST, PUT")
			h.Set("Access-Control-Allow-Headers", "Authorization, Content-Type")
			h.Set("Access-Control-Max-Age", "600")
			w.WriteHeader(http.StatusNoContent)
			return true
		}
	}
	return false
}
