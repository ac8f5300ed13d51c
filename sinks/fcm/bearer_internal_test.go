package fcm

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"golang.org/x/oauth2/jwt"
)

// closeTracker is a request body that records whether it was closed.
type closeTracker struct {
	io.Reader
	closed bool
}

func (c *closeTracker) Close() error { c.closed = true; return nil }

func TestABearerThatGetsNoTokenClosesTheRequestBody(t *testing.T) {
	tokens := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, `{"error":"internal_failure"}`, http.StatusInternalServerError)
	}))
	defer tokens.Close()
	sent := false
	b := &bearer{conf: &jwt.Config{Email: "x@example.com", PrivateKey: testKey(t), TokenURL: tokens.URL}, timeout: 10 * time.Second,
		sem: make(chan struct{}, 1), next: roundTripFunc(func(*http.Request) (*http.Response, error) { sent = true; return nil, nil })}
	body := &closeTracker{Reader: strings.NewReader(`{"message":{}}`)}
	req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, "http://fcm.invalid/v1/projects/p/messages:send", body)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.RoundTrip(req); err == nil {
		t.Fatal("RoundTrip without a token succeeded")
	}
	if !body.closed || sent {
		t.Fatalf("body closed %v, request sent %v; want the body closed and nothing sent (a RoundTripper closes the body even on error)", body.closed, sent)
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// testKey is a fresh RSA key in PEM, as a service account key holds it.
func testKey(t *testing.T) []byte {
	t.Helper()
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
}
