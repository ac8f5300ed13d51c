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
