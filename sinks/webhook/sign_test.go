package webhook_test

import (
	"encoding/base64"
	"fmt"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/heraldhq/herald/sinks/webhook"
)

// The Standard Webhooks reference test vector (the specification's
// libraries' tests): this secret, id, timestamp and body sign to this
// signature. A receiver's stock library verifies what matches it.
const (
	vecSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	vecID     = "msg_p5jXN8AQM9LWM0D4loKWxJek"
	vecTS     = 1614265330
	vecBody   = `{"test": 2432232314}`
	vecSig    = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
)

func TestSignReproducesTheStandardWebhooksTestVector(t *testing.T) {
	key, err := webhook.SecretKey(vecSecret)
	if err != nil {
		t.Fatal(err)
	}
	if got := webhook.Sign(key, vecID, vecTS, []byte(vecBody)); got != vecSig {
		t.Fatalf("Sign = %s, want %s", got, vecSig)
	}
}

func TestVerifyAcceptsOnlyAnAuthenticFreshMessage(t *testing.T) {
	at := time.Unix(vecTS, 0)
	headers := func(id, ts, sig string) http.Header {
		h := http.Header{}
		for k, v := range map[string]string{webhook.HeaderID: id, webhook.HeaderTimestamp: ts, webhook.HeaderSignature: sig} {
			if v != "" {
				h.Set(k, v)
			}
		}
		return h
	}
	ts := strconv.Itoa(vecTS)
	cases := []struct {
		name    string
		h       http.Header
		body    string
		now     time.Time
		secrets []string
		ok      bool
	}{
		{"the test vector verifies", headers(vecID, ts, vecSig), vecBody, at, []string{vecSecret}, true},
		{"one matching signature among several verifies", headers(vecID, ts, "v1,bm9wZQ== "+vecSig), vecBody, at, []string{vecSecret}, true},
		{"one matching secret among several verifies", headers(vecID, ts, vecSig), vecBody, at, []string{webhook.NewSecret(), vecSecret}, true},
		{"a changed body does not verify", headers(vecID, ts, vecSig), `{"test": 2432232315}`, at, []string{vecSecret}, false},
		{"a changed id does not verify", headers(vecID+"x", ts, vecSig), vecBody, at, []string{vecSecret}, false},
		{"another secret does not verify", headers(vecID, ts, vecSig), vecBody, at, []string{webhook.NewSecret()}, false},
		{"a timestamp exactly the tolerance old verifies", headers(vecID, ts, vecSig), vecBody, at.Add(5 * time.Minute), []string{vecSecret}, true},
		{"a timestamp exactly the tolerance ahead verifies", headers(vecID, ts, vecSig), vecBody, at.Add(-5 * time.Minute), []string{vecSecret}, true},
		{"an unusable secret among the secrets is passed over", headers(vecID, ts, vecSig), vecBody, at, []string{"whsec_c2hvcnQ=", vecSecret}, true},
		{"a timestamp six minutes old does not verify", headers(vecID, ts, vecSig), vecBody, at.Add(6 * time.Minute), []string{vecSecret}, false},
		{"a timestamp six minutes ahead does not verify", headers(vecID, ts, vecSig), vecBody, at.Add(-6 * time.Minute), []string{vecSecret}, false},
		{"a missing signature does not verify", headers(vecID, ts, ""), vecBody, at, []string{vecSecret}, false},
		{"a missing id does not verify", headers("", ts, vecSig), vecBody, at, []string{vecSecret}, false},
		{"a missing timestamp does not verify", headers(vecID, "", vecSig), vecBody, at, []string{vecSecret}, false},
		{"a timestamp that is not integer seconds does not verify", headers(vecID, ts+".5", vecSig), vecBody, at, []string{vecSecret}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := webhook.Verify(c.h, []byte(c.body), c.now, 5*time.Minute, c.secrets...)
			if (err == nil) != c.ok {
				t.Fatalf("Verify: %v, want ok=%v", err, c.ok)
			}
		})
	}
}

func TestSecretsAreWhsecAndBase64Of24To64Bytes(t *testing.T) {
	if _, err := webhook.SecretKey(webhook.NewSecret()); err != nil {
		t.Fatalf("a new secret is refused: %v", err)
	}
	for n, ok := range map[int]bool{23: false, 24: true, 64: true, 65: false} {
		secret := webhook.SecretPrefix + base64.StdEncoding.EncodeToString(make([]byte, n))
		t.Run(fmt.Sprintf("a key of %d bytes is accepted: %v", n, ok), func(t *testing.T) {
			if key, err := webhook.SecretKey(secret); (err == nil) != ok || (ok && len(key) != n) {
				t.Fatalf("SecretKey = %d bytes, %v", len(key), err)
			}
		})
	}
	for _, bad := range []string{"MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "whsec_not base64", "whsec_c2hvcnQ="} {
		t.Run(bad+" is refused", func(t *testing.T) {
			if _, err := webhook.SecretKey(bad); err == nil {
				t.Fatal("accepted")
			}
		})
	}
}
