package webhook

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// The Standard Webhooks headers.
const (
	HeaderID        = "webhook-id"
	HeaderTimestamp = "webhook-timestamp"
	HeaderSignature = "webhook-signature"
)

// SecretPrefix marks a symmetric signing secret: "whsec_" and the base64
// of the key.
const SecretPrefix = "whsec_"

// Secret key lengths the specification allows (24 to 64 bytes).
const (
	MinSecretBytes = 24
	MaxSecretBytes = 64
)

// NewSecret returns a fresh signing secret of 32 random bytes.
func NewSecret() string {
	var b [32]byte
	rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return SecretPrefix + base64.StdEncoding.EncodeToString(b[:])
}

// SecretKey decodes a "whsec_" secret into its HMAC key, checking its
// length.
func SecretKey(secret string) ([]byte, error) {
	b64, ok := strings.CutPrefix(secret, SecretPrefix)
	if !ok {
		return nil, errors.New("webhook: a secret starts with " + SecretPrefix)
	}
	key, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		return nil, errors.New("webhook: a secret is whsec_ and standard base64")
	}
	if len(key) < MinSecretBytes || len(key) > MaxSecretBytes {
		return nil, fmt.Errorf("webhook: a secret's key is %d to %d bytes, not %d", MinSecretBytes, MaxSecretBytes, len(key))
	}
	return key, nil
}

// Sign returns the webhook-signature value of one message: "v1," and the
// base64 HMAC-SHA256, under the secret's key, of id "." timestamp "."
// body.
func Sign(key []byte, id string, timestamp int64, body []byte) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(id))
	m.Write([]byte{'.'})
	m.Write(strconv.AppendInt(nil, timestamp, 10))
	m.Write([]byte{'.'})
	m.Write(body)
	return "v1," + base64.StdEncoding.EncodeToString(m.Sum(nil))
}

// Verify checks a received message as a Standard Webhooks consumer does:
// the three headers are present, the timestamp is within tolerance of
// now, and one of the space-separated v1 signatures matches one of the
// secrets (constant-time). It returns the webhook-id.
func Verify(h http.Header, body []byte, now time.Time, tolerance time.Duration, secrets ...string) (string, error) {
	id, ts, sigs := h.Get(HeaderID), h.Get(HeaderTimestamp), h.Get(HeaderSignature)
	if id == "" || ts == "" || sigs == "" {
		return "", errors.New("webhook: missing webhook-id, webhook-timestamp or webhook-signature")
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return id, errors.New("webhook: webhook-timestamp is not integer seconds")
	}
	if d := now.Sub(time.Unix(sec, 0)); d > tolerance || d < -tolerance {
		return id, fmt.Errorf("webhook: webhook-timestamp is %s away from now", d.Round(time.Second))
	}
	for _, secret := range secrets {
		key, err := SecretKey(secret)
		if err != nil {
			continue
		}
		want := Sign(key, id, sec, body)
		for _, s := range strings.Fields(sigs) {
			if hmac.Equal([]byte(s), []byte(want)) {
				return id, nil
			}
		}
	}
	return id, errors.New("webhook: no signature matches")
}
