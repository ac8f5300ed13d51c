package api

import (
	"net/http"
	"slices"
	"testing"

	"github.com/heraldhq/herald/internal/testenv"
	"github.com/heraldhq/herald/schemas"
	"github.com/heraldhq/herald/sdk"
	"github.com/heraldhq/herald/topics"
)

// TestAnEmailRegistrationThatBreaksARuleIsRefusedNamingTheField: the
// address is checked with net/mail, and email goes with platform email
// only.
func TestAnEmailRegistrationThatBreaksARuleIsRefusedNamingTheField(t *testing.T) {
	s := unstarted(t, nil)
	cases := []struct{ name, body, field string }{
		{"an address that is no address is a 422", `{"platform":"email","email":"not an address"}`, "email"},
		{"an address without a domain is a 422", `{"email":"ada"}`, "email"},
		{"an address with a display name is a 422", `{"email":"Ada <ada@example.com>"}`, "email"},
		{"an empty address is a 422", `{"email":""}`, "email"},
		{"an email device needs its address", `{"platform":"email"}`, "email"},
		{"an email device takes no token", `{"email":"ada@example.com","token":"t"}`, "token"},
		{"an email device takes no subscription", `{"email":"ada@example.com","webPush":{"endpoint":"https://x","p256dh":"k","auth":"a"}}`, "webPush"},
		{"an ios device takes no address", `{"platform":"ios","token":"t","email":"ada@example.com"}`, "email"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w := do(t, s, "PUT", "/v1/users/u1/devices/mail", keyA, tc.body)
			if w.Code != http.StatusUnprocessableEntity {
				t.Fatalf("status %d, want 422: %s", w.Code, w.Body)
			}
			p := problemOf(t, w)
			if !slices.ContainsFunc(p.Errors, func(e sdk.FieldError) bool { return e.Field == tc.field }) {
				t.Fatalf("errors %+v do not name %q", p.Errors, tc.field)
			}
		})
	}
	for _, body := range []string{`{"email":"ada@example.com"}`, `{"platform":"email","email":"ada.lovelace+herald@mail.example.co.uk","locale":"en-GB"}`} {
		// Valid: it reaches the replica, which an unstarted server has not
		// loaded (503).
		if w := do(t, s, "PUT", "/v1/users/u1/devices/mail", keyA, body); w.Code != http.StatusServiceUnavailable {
			t.Fatalf("PUT %s: status %d, want 503 (past validation): %s", body, w.Code, w.Body)
		}
	}
	// Preferences name the email channel like the others.
	if w := do(t, s, "PUT", "/v1/users/u1/preferences", keyA, `{"channels":{"email":false}}`); w.Code != http.StatusServiceUnavailable {
		t.Fatalf("PUT preferences with email: status %d, want 503 (past validation): %s", w.Code, w.Body)
	}
}

// TestAnEmailAddressRegistersAsADeviceOnTheRealBroker: PUT {"email": …}
// answers the device with its address, GET reads it back, and
// herald.devices holds it as a device of platform email whose token is
// the address (what the route stage and the email sink read).
func TestAnEmailAddressRegistersAsADeviceOnTheRealBroker(t *testing.T) {
	p := startPipelineWith(t, false, nil)
	a := p.call(t, "PUT", "/v1/users/ada/devices/mail", keyA, `{"email":"ada@example.com"}`)
	if a.status != 201 {
		t.Fatalf("PUT: status %d: %s", a.status, a.body)
	}
	for _, got := range []sdk.Device{decode[sdk.Device](t, a), decode[sdk.Device](t, p.call(t, "GET", "/v1/users/ada/devices/mail", keyA, ""))} {
		if got.Platform != sdk.PlatformEmail || got.Email != "ada@example.com" || got.Token != "" || !got.Enabled {
			t.Fatalf("device %+v, want an enabled email device with its address and no token", got)
		}
	}
	var stored schemas.Device
	p.eventually(t, "herald.devices holds the address", func() bool {
		for _, r := range testenv.ReadCommitted(t, p.brokers, p.cat.Name(topics.Devices)) {
			if string(r.Key) == schemas.DeviceKey("ta", "ada", "mail") && schemas.Decode(r.Value, &stored) == nil {
				return true
			}
		}
		return false
	})
	if stored.Platform != "email" || stored.Token != "ada@example.com" {
		t.Fatalf("herald.devices has %+v, want platform email with the address as its token", stored)
	}
}
