package sdk_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/heraldhq/herald/api"
	"github.com/heraldhq/herald/sdk"
	"github.com/heraldhq/herald/topics"
)

// observed counts the attempts reaching a handler and the idempotency keys
// they carry.
type observed struct {
	mu       sync.Mutex
	attempts int
	keys     map[string]bool
}

func (o *observed) wrap(h func(n int, w http.ResponseWriter, r *http.Request)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		o.mu.Lock()
		o.attempts++
		n := o.attempts
		if o.keys == nil {
			o.keys = map[string]bool{}
		}
		o.keys[r.Header.Get("Idempotency-Key")] = true
		o.mu.Unlock()
		h(n, w, r)
	})
}

// notConnected is the real API server, never connected to Kafka: it
// validates fully and answers a valid send with 503 and Retry-After.
func notConnected(t *testing.T) *api.Server {
	t.Helper()
	s, err := api.New(api.Config{Brokers: []string{"127.0.0.1:1"}, Catalog: topics.New(topics.Options{}), Keys: api.DevKeys(),
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestTheClientRetriesOnlyTransientFailuresAndKeepsItsKey(t *testing.T) {
	srv := notConnected(t)
	valid := sdk.Notification{Type: "t", Recipients: []string{"u"}, Title: "x", Body: "y"}
	cases := []struct {
		name         string
		key          string
		n            sdk.Notification
		wantStatus   int
		wantAttempts int
	}{
		{"a validation error is answered at once", api.DevAPIKey, sdk.Notification{Type: "t", Recipients: []string{"u"}, Title: "x"}, 422, 1},
		{"a wrong key is answered at once", "wrong", valid, 401, 1},
		{"an unavailable server is retried with the same key", api.DevAPIKey, valid, 503, 2},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var o observed
			hs := httptest.NewServer(o.wrap(func(_ int, w http.ResponseWriter, r *http.Request) { srv.ServeHTTP(w, r) }))
			defer hs.Close()
			c := sdk.NewClient(hs.URL, tc.key)
			c.MaxAttempts = 2
			_, err := c.Send(context.Background(), tc.n)
			var ae *sdk.APIError
			if !errors.As(err, &ae) || ae.StatusCode != tc.wantStatus {
				t.Fatalf("error %v, want an APIError %d", err, tc.wantStatus)
			}
			if ae.Problem.Status != tc.wantStatus || ae.Problem.Type == "" {
				t.Fatalf("problem %+v", ae.Problem)
			}
			if o.attempts != tc.wantAttempts || len(o.keys) != 1 {
				t.Fatalf("%d attempts with %d keys, want %d attempts with one key", o.attempts, len(o.keys), tc.wantAttempts)
			}
		})
	}
}

func TestTheClientGivesUpWhenItsContextEnds(t *testing.T) {
	srv := notConnected(t)
	hs := httptest.NewServer(srv)
	defer hs.Close()
	c := sdk.NewClient(hs.URL, api.DevAPIKey)
	c.MaxAttempts = 100
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	_, err := c.Send(ctx, sdk.Notification{Type: "t", Recipients: []string{"u"}, Title: "x", Body: "y"})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("error %v, want the context's", err)
	}
}

func TestTheClientSendsAnIdempotencyKeyUnlessTheIDComesFromAKey(t *testing.T) {
	key := sdk.Key{"invoice": sdk.String("inv_2201")}
	cases := []struct {
		name string
		n    sdk.Notification
		want func(string) bool
	}{
		{"a send without keys gets a fresh key", sdk.Notification{}, func(k string) bool { return len(k) == 32 }},
		{"the caller's key is sent", sdk.Notification{IdempotencyKey: "order-7"}, func(k string) bool { return k == "order-7" }},
		{"a send whose id comes from its key gets none, so the id stays canonical", sdk.Notification{Key: key}, func(k string) bool { return k == "" }},
		{"a send with a key and a dedupe key gets a fresh key", sdk.Notification{Key: key, DedupeKey: "d"}, func(k string) bool { return len(k) == 32 }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := make(chan string, 1)
			hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				got <- r.Header.Get("Idempotency-Key")
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusAccepted)
				w.Write([]byte(`{"requestId":"r","notifications":[],"deliveries":[],"skipped":[]}`))
			}))
			defer hs.Close()
			n := tc.n
			n.Type, n.Recipients, n.Title, n.Body = "invoice.paid", []string{"u_8831"}, "x", "y"
			if _, err := sdk.NewClient(hs.URL, api.DevAPIKey).Send(context.Background(), n); err != nil {
				t.Fatal(err)
			}
			if k := <-got; !tc.want(k) {
				t.Fatalf("Idempotency-Key %q", k)
			}
		})
	}
}
