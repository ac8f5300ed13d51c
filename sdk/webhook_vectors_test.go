package sdk_test

import (
	"encoding/json"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/heraldhq/herald/sinks/webhook"
)

// webhookVectors is sdk/testdata/webhook_vectors.json, the Standard
// Webhooks vectors the Node and Python SDKs' tests check too.
type webhookVectors struct {
	ToleranceSeconds int64 `json:"toleranceSeconds"`
	Sign             []struct {
		Name, Secret, ID, Body, Signature string
		Timestamp                         int64
	} `json:"sign"`
	Verify []struct {
		Name    string            `json:"name"`
		Headers map[string]string `json:"headers"`
		Body    string            `json:"body"`
		Now     int64             `json:"now"`
		Secrets []string          `json:"secrets"`
		OK      bool              `json:"ok"`
	} `json:"verify"`
}

// TestHeraldSignsAndVerifiesTheSharedWebhookVectors ties the vectors the
// other SDKs test against to what herald's webhook sink actually does.
func TestHeraldSignsAndVerifiesTheSharedWebhookVectors(t *testing.T) {
	b, err := os.ReadFile("testdata/webhook_vectors.json")
	if err != nil {
		t.Fatal(err)
	}
	var v webhookVectors
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	if len(v.Sign) == 0 || len(v.Verify) == 0 {
		t.Fatal("no vectors")
	}
	for _, s := range v.Sign {
		t.Run("sign: "+s.Name, func(t *testing.T) {
			key, err := webhook.SecretKey(s.Secret)
			if err != nil {
				t.Fatal(err)
			}
			if got := webhook.Sign(key, s.ID, s.Timestamp, []byte(s.Body)); got != s.Signature {
				t.Fatalf("Sign = %s, want %s", got, s.Signature)
			}
		})
	}
	for _, c := range v.Verify {
		t.Run("verify: "+c.Name, func(t *testing.T) {
			h := http.Header{}
			for k, val := range c.Headers {
				h.Set(k, val)
			}
			_, err := webhook.Verify(h, []byte(c.Body), time.Unix(c.Now, 0), time.Duration(v.ToleranceSeconds)*time.Second, c.Secrets...)
			if (err == nil) != c.OK {
				t.Fatalf("Verify: %v, want ok=%v", err, c.OK)
			}
		})
	}
}
