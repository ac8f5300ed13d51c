package fcm_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/internal/testenv"
	"github.com/heraldhq/herald/sinks"
	"github.com/heraldhq/herald/sinks/fcm"
	"github.com/heraldhq/herald/sinks/fcm/emulator"
)

// keyWith is em's service account key with fields replaced ("" deletes).
func keyWith(t *testing.T, em *emulator.Emulator, fields map[string]string) []byte {
	t.Helper()
	var key map[string]string
	if err := json.Unmarshal(em.ServiceAccountJSON(), &key); err != nil {
		t.Fatal(err)
	}
	for k, v := range fields {
		if v == "" {
			delete(key, k)
		} else {
			key[k] = v
		}
	}
	b, err := json.Marshal(key)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestTheServiceAccountKeyAndProjectComeFromConfiguration(t *testing.T) {
	em, _ := start(t)
	dir := t.TempDir()
	file := filepath.Join(dir, "service-account.json")
	if err := os.WriteFile(file, em.ServiceAccountJSON(), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		cfg  fcm.Config
	}{
		{"a key file is read", fcm.Config{CredentialsFile: file}},
		{"the key's JSON is used before a key file", fcm.Config{CredentialsJSON: em.ServiceAccountJSON(), CredentialsFile: filepath.Join(dir, "absent.json")}},
		{"a configured project id serves a key without one", fcm.Config{CredentialsJSON: keyWith(t, em, map[string]string{"project_id": ""}), ProjectID: "herald-test"}},
		{"a configured project id wins over the key's", fcm.Config{CredentialsJSON: keyWith(t, em, map[string]string{"project_id": "another-project"}), ProjectID: "herald-test"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.Endpoint = em.URL() + "/v1"
			p, err := fcm.New(context.Background(), tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer p.CloseIdleConnections()
			if res := send(p, command("fcm-token-config")); res.Class != sinks.Success || !strings.HasPrefix(res.MessageID, "projects/herald-test/messages/") {
				t.Fatalf("got %v %q message %q (%v), want a success in project herald-test", res.Class, res.Rule, res.MessageID, res.Err)
			}
		})
	}
}

func TestBadFCMConfigurationIsRefusedWithoutNamingTheKey(t *testing.T) {
	em, _ := start(t)
	dir := t.TempDir()
	cases := []struct {
		name string
		cfg  fcm.Config
	}{
		{"no key", fcm.Config{}},
		{"a key file that is absent", fcm.Config{CredentialsFile: filepath.Join(dir, "absent.json")}},
		{"a key cut short (unreadable JSON)", fcm.Config{CredentialsJSON: em.ServiceAccountJSON()[:len(em.ServiceAccountJSON())-20]}},
		{"a key without project id, and none configured", fcm.Config{CredentialsJSON: keyWith(t, em, map[string]string{"project_id": ""})}},
	}
	var key struct {
		PrivateKey string `json:"private_key"`
	}
	json.Unmarshal(em.ServiceAccountJSON(), &key)
	secret := key.PrivateKey[40:80]
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := fcm.New(context.Background(), tc.cfg)
			if err == nil {
				t.Fatal("accepted")
			}
			if strings.Contains(err.Error(), secret) {
				t.Fatalf("the error quotes the key: %v", err)
			}
		})
	}
}

func TestATokenEndpointThatFailsIsRetryableAndSendsNothing(t *testing.T) {
	cases := []struct {
		name   string
		status int
		body   string
		class  sinks.Class
		rule   string
		reason string
	}{
		{"a 500 of the token endpoint is retryable", 500, `{"error":"internal_failure"}`, sinks.Retryable, "not_sent", ""},
		{"a 503 of the token endpoint is retryable", 503, ``, sinks.Retryable, "not_sent", ""},
		{"a 401 of the token endpoint is a permanent auth error", 401, `{"error":"unauthorized_client"}`, sinks.Permanent, "auth", "unauthorized_client"},
		{"a 403 of the token endpoint is a permanent auth error", 403, `{"error":"access_denied"}`, sinks.Permanent, "auth", "access_denied"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			em, _ := start(t)
			tokens := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(tc.status)
				w.Write([]byte(tc.body))
			}))
			defer tokens.Close()
			p, err := fcm.New(context.Background(), fcm.Config{Endpoint: em.URL() + "/v1", CredentialsJSON: keyWith(t, em, map[string]string{"token_uri": tokens.URL + "/token"})})
			if err != nil {
				t.Fatal(err)
			}
			defer p.CloseIdleConnections()
			res := send(p, command("fcm-token"))
			if res.Class != tc.class || res.Rule != tc.rule || res.Reason != tc.reason || res.RetireDevice {
				t.Fatalf("got %v %q %q retire %v (%v), want %v %q %q", res.Class, res.Rule, res.Reason, res.RetireDevice, res.Err, tc.class, tc.rule, tc.reason)
			}
			if n := em.Total(); n != 0 {
				t.Fatalf("the emulator read %d messages without a token", n)
			}
		})
	}
}

// hangingTokens is a provider whose token endpoint never answers (em the
// emulator it would send to): the endpoint reports each request on
// arrived, then waits until the client gives up (its request's context
// ends) and reports that on gaveUp.
func hangingTokens(t *testing.T, timeout time.Duration) (em *emulator.Emulator, p *fcm.Provider, arrived, gaveUp chan struct{}) {
	em, _ = start(t)
	arrived, gaveUp = make(chan struct{}, 8), make(chan struct{}, 8)
	ended := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body) // read whole: the server then watches the connection
		arrived <- struct{}{}
		select {
		case <-r.Context().Done():
			gaveUp <- struct{}{}
		case <-ended:
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(ended) }) // first: the handlers return, then Close
	p, err := fcm.New(context.Background(), fcm.Config{Endpoint: em.URL() + "/v1", CredentialsJSON: keyWith(t, em, map[string]string{"token_uri": srv.URL + "/token"}), TokenTimeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.CloseIdleConnections)
	return em, p, arrived, gaveUp
}

func TestATokenFetchEndsWithTheSendThatNeedsIt(t *testing.T) {
	for _, tc := range []struct {
		name    string
		timeout time.Duration // TokenTimeout
		cancel  bool          // cancel the send once its token is asked for
		want    error
	}{
		{"a send cancelled while its token is fetched stops the fetch and sends nothing", time.Hour, true, context.Canceled},
		{"a fetch longer than TokenTimeout fails the send that has no deadline of its own", 50 * time.Millisecond, false, context.DeadlineExceeded},
	} {
		t.Run(tc.name, func(t *testing.T) {
			em, p, arrived, gaveUp := hangingTokens(t, tc.timeout)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan sinks.Result, 1)
			go func() { done <- p.Send(ctx, command("fcm-token")) }()
			if tc.cancel {
				testenv.Await(t, arrived, "the token request")
				cancel()
			}
			res := testenv.Await(t, done, "the send")
			if res.Class != sinks.Retryable || res.Rule != "not_sent" || !errors.Is(res.Err, tc.want) {
				t.Fatalf("got %v %q (%v), want retryable not_sent caused by %v", res.Class, res.Rule, res.Err, tc.want)
			}
			testenv.Await(t, gaveUp, "the token endpoint seeing the fetch abandoned")
			if n := em.Total(); n != 0 {
				t.Fatalf("the emulator read %d messages, want none", n)
			}
		})
	}
	t.Run("a send waiting for another's fetch gives up when its own context ends", func(t *testing.T) {
		em, p, arrived, _ := hangingTokens(t, time.Hour)
		first, stopFirst := context.WithCancel(context.Background())
		defer stopFirst()
		go p.Send(first, command("fcm-token-1"))
		testenv.Await(t, arrived, "the first send's token request")
		second, stopSecond := context.WithCancel(context.Background())
		done := make(chan sinks.Result, 1)
		go func() { done <- p.Send(second, command("fcm-token-2")) }()
		stopSecond()
		res := testenv.Await(t, done, "the second send")
		if res.Class != sinks.Retryable || res.Rule != "not_sent" || !errors.Is(res.Err, context.Canceled) || !strings.Contains(res.Err.Error(), "wait for an access token") {
			t.Fatalf("got %v %q (%v), want retryable not_sent: it gave up waiting", res.Class, res.Rule, res.Err)
		}
		if n := em.Total(); n != 0 {
			t.Fatalf("the emulator read %d messages, want none", n)
		}
	})
}
