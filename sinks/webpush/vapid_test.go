package webpush_test

import (
	"encoding/base64"
	"strings"
	"testing"

	"github.com/heraldhq/herald/sinks/webpush"
)

func TestCheckVAPIDKeysTakesOnlyOnePair(t *testing.T) {
	pub, priv, err := webpush.GenerateVAPIDKeys()
	if err != nil {
		t.Fatal(err)
	}
	otherPub, otherPriv, err := webpush.GenerateVAPIDKeys()
	if err != nil {
		t.Fatal(err)
	}
	padded := func(s string) string {
		b, err := base64.RawURLEncoding.DecodeString(s)
		if err != nil {
			t.Fatal(err)
		}
		return base64.URLEncoding.EncodeToString(b)
	}
	short := base64.RawURLEncoding.EncodeToString(make([]byte, 33))
	for _, tc := range []struct {
		name, public, private, want string
	}{
		{"a generated pair is one", pub, priv, ""},
		{"a padded pair is one, as webpush-go reads it", padded(pub), padded(priv), ""},
		{"the keys of two pairs are refused", pub, otherPriv, "not one pair"},
		{"the keys swapped are refused", priv, pub, "not an uncompressed P-256 point"},
		{"a public key that is not base64url is refused", "pubkeyXYZ!", priv, "public key is not base64url"},
		{"a private key that is not base64url is refused", pub, "PRIVSECRET!", "private key is not base64url"},
		{"a private key of the wrong length is refused", otherPub, short, "want 32 bytes, got 33"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := webpush.CheckVAPIDKeys(tc.public, tc.private)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("got %v, want an error with %q", err, tc.want)
			case err != nil && strings.Contains(err.Error(), tc.private):
				t.Fatalf("the error shows the private key: %v", err)
			}
		})
	}
}

func TestCheckSubscriberTakesAMailtoAddressOrAnHTTPSURL(t *testing.T) {
	for _, tc := range []struct {
		subscriber string
		ok         bool
	}{
		{"", true},
		{"mailto:ops@example.com", true},
		{"ops@example.com", true},
		{"https://example.com/contact", true},
		{"foo", false},
		{"mailto:", false},
		{"https://", false},
		{"http://example.com/contact", false},
		{"mailto:ops example.com", false},
	} {
		name := "a contact " + tc.subscriber + " is refused"
		if tc.ok {
			name = "a contact " + tc.subscriber + " is taken"
		}
		t.Run(name, func(t *testing.T) {
			if err := webpush.CheckSubscriber(tc.subscriber); (err == nil) != tc.ok {
				t.Fatalf("CheckSubscriber(%q) = %v", tc.subscriber, err)
			}
		})
	}
}
