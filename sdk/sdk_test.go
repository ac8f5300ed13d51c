package sdk

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/heraldhq/herald/identity"
)

func TestDeriveIDPicksTheIDByTheDocumentedRule(t *testing.T) {
	key := Key{"invoice": String("inv_2201")}
	canonical, _ := identity.NotificationID("invoice.paid", "u_8831", key)
	cases := []struct {
		name                      string
		key                       Key
		dedupe, idem, want, wantS string
	}{
		{"a dedupe key wins over everything", key, "d", "i", identity.DedupeID("acme", "invoice.paid", "u_8831", "d"), SourceDedupeKey},
		{"an idempotency key wins over a key", key, "", "i", identity.IdempotencyID("acme", "invoice.paid", "u_8831", "i"), SourceIdempotencyKey},
		{"a key alone gives the canonical id", key, "", "", canonical, SourceKey},
		{"the empty key is a key", Key{}, "", "", mustID(t, Key{}), SourceKey},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			id, src, err := DeriveID("acme", "invoice.paid", "u_8831", tc.key, tc.dedupe, tc.idem)
			if err != nil || id != tc.want || src != tc.wantS {
				t.Fatalf("got (%s, %s, %v), want (%s, %s)", id, src, err, tc.want, tc.wantS)
			}
		})
	}
	t.Run("nothing gives a fresh random id each time", func(t *testing.T) {
		a, src, _ := DeriveID("acme", "t", "r", nil, "", "")
		b, _, _ := DeriveID("acme", "t", "r", nil, "", "")
		if a == b || src != SourceRandom || !identity.Valid(a) {
			t.Fatalf("got %s and %s (%s)", a, b, src)
		}
	})
}

func mustID(t *testing.T, k Key) string {
	id, err := identity.NotificationID("invoice.paid", "u_8831", k)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func TestRequestsMakeOneRecordPerRecipientSharingTheCall(t *testing.T) {
	n := Notification{Type: "invoice.paid", Title: "t", Body: "b", Key: Key{"invoice": Number(7)}, Payload: json.RawMessage(`{"a":1}`)}
	at := time.UnixMilli(1_700_000_000_000)
	reqs, err := n.Requests([]string{"u1", "u2"}, RequestOptions{Tenant: "acme", Producer: "billing", Source: "sdk", Now: at})
	if err != nil {
		t.Fatal(err)
	}
	if len(reqs) != 2 || reqs[0].RequestID != reqs[1].RequestID || reqs[0].NotificationID == reqs[1].NotificationID {
		t.Fatalf("requests %+v", reqs)
	}
	for _, r := range reqs {
		want, _ := identity.NotificationID("invoice.paid", r.Recipient, n.Key)
		if r.NotificationID != want || r.IDSource != SourceKey || string(r.Key) != `{"invoice":7}` || r.CreatedAt != at.UnixMilli() || r.Tenant != "acme" {
			t.Fatalf("request %+v", r)
		}
	}
	bad := []struct {
		name       string
		n          Notification
		recipients []string
	}{
		{"a send without a type is refused", Notification{Title: "t", Body: "b"}, []string{"u"}},
		{"a send without a body is refused", Notification{Type: "x", Title: "t"}, []string{"u"}},
		{"a send without recipients is refused", Notification{Type: "x", Title: "t", Body: "b"}, nil},
		{"an empty recipient is refused", Notification{Type: "x", Title: "t", Body: "b"}, []string{""}},
		{"a payload that is not JSON is refused", Notification{Type: "x", Title: "t", Body: "b", Payload: json.RawMessage(`{`)}, []string{"u"}},
		{"a recipient that is not UTF-8 is refused when the key makes the id", Notification{Type: "x", Title: "t", Body: "b", Key: Key{"a": Number(1)}}, []string{"u", "\xff"}},
		{"a key that JavaScript would change is refused", Notification{Type: "x", Title: "t", Body: "b", Key: Key{"__proto__": Number(1)}}, []string{"u"}},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := tc.n.Requests(tc.recipients, RequestOptions{Tenant: "acme"}); err == nil {
				t.Fatal("accepted")
			}
		})
	}
}

func TestBackoffIsJitteredCappedAndHonoursRetryAfter(t *testing.T) {
	c := &Client{MinBackoff: 100 * time.Millisecond, MaxBackoff: time.Second}
	cases := []struct {
		name       string
		n          int
		retryAfter time.Duration
		lo, hi     time.Duration
	}{
		{"the first retry waits up to twice the minimum", 1, 0, 0, 200 * time.Millisecond},
		{"later retries wait up to the maximum", 10, 0, 0, time.Second},
		{"a huge attempt number does not overflow", 80, 0, 0, time.Second},
		{"Retry-After is a floor", 1, 3 * time.Second, 3 * time.Second, 3 * time.Second},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for i := 0; i < 200; i++ {
				if d := c.backoff(tc.n, tc.retryAfter); d < tc.lo || d > tc.hi {
					t.Fatalf("backoff %v outside [%v, %v]", d, tc.lo, tc.hi)
				}
			}
		})
	}
}
