package webpush

import (
	"bytes"
	"crypto/ecdh"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
)

// CheckVAPIDPublicKey reports whether public is a VAPID public key as
// browsers subscribe with it: an uncompressed P-256 point in base64url
// (unpadded, as GenerateVAPIDKeys writes it; padded is read too, as
// webpush-go reads it).
func CheckVAPIDPublicKey(public string) error {
	_, err := vapidPublic(public)
	return err
}

// CheckVAPIDKeys reports whether public and private are one VAPID key
// pair: the public key as CheckVAPIDPublicKey takes it, the private key a
// P-256 scalar (32 bytes in base64url) whose public key it is. A pair that
// is not one signs JWTs that every push service refuses: every delivery
// would fail.
func CheckVAPIDKeys(public, private string) error {
	pub, err := vapidPublic(public)
	if err != nil {
		return err
	}
	raw, err := decodeVAPIDKey(private)
	if err != nil {
		return fmt.Errorf("webpush: the VAPID private key is not base64url: %w", err)
	}
	key, err := ecdh.P256().NewPrivateKey(raw)
	if err != nil {
		return fmt.Errorf("webpush: the VAPID private key is not a P-256 key (want 32 bytes, got %d)", len(raw))
	}
	if !bytes.Equal(key.PublicKey().Bytes(), pub.Bytes()) {
		return errors.New("webpush: the VAPID private key is not the public key's: they are not one pair")
	}
	return nil
}

// CheckSubscriber reports whether s is a VAPID contact (RFC 8292): a
// mailto: address, a bare e-mail address (sent as mailto:), or an https
// URL; empty means the default.
func CheckSubscriber(s string) error {
	if url, ok := strings.CutPrefix(s, "https://"); ok && url != "" {
		return nil
	}
	if addr := strings.TrimPrefix(s, "mailto:"); s == "" || strings.Contains(addr, "@") && !strings.ContainsAny(addr, " /:") {
		return nil
	}
	return fmt.Errorf("webpush: the VAPID contact %q is neither a mailto: address nor an https URL", s)
}

func vapidPublic(public string) (*ecdh.PublicKey, error) {
	raw, err := decodeVAPIDKey(public)
	if err != nil {
		return nil, fmt.Errorf("webpush: the VAPID public key is not base64url: %w", err)
	}
	pub, err := ecdh.P256().NewPublicKey(raw)
	if err != nil {
		return nil, fmt.Errorf("webpush: the VAPID public key is not an uncompressed P-256 point (want 65 bytes starting 0x04, got %d bytes)", len(raw))
	}
	return pub, nil
}

// decodeVAPIDKey reads a key in base64url, padded or not.
func decodeVAPIDKey(s string) ([]byte, error) {
	if b, err := base64.URLEncoding.DecodeString(s); err == nil {
		return b, nil
	}
	return base64.RawURLEncoding.DecodeString(s)
}
