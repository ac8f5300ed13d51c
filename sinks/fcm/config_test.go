package fcm_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

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
