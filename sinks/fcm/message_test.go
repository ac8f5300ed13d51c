package fcm_test

import (
	"context"
	"encoding/json"
	"maps"
	"strconv"
	"testing"
	"time"

	"github.com/heraldhq/herald/identity"
	"github.com/heraldhq/herald/schemas"
	"github.com/heraldhq/herald/sinks/fcm"
	"github.com/heraldhq/herald/sinks/fcm/emulator"
)

func TestEachMessageCarriesTheCommandsIdsDataAndTTL(t *testing.T) {
	em, err := emulator.Start(emulator.Options{ProjectID: "herald-test"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { em.Close() })
	occurrence := identity.OccurrenceID(nid, now.UnixMilli())
	cases := []struct {
		name     string
		cfg      fcm.Config
		edit     func(*schemas.DeliveryCommand)
		data     map[string]string // besides id and deliveryId
		priority string
		ttl      time.Duration // -1: none
	}{
		{name: "a command with neither occurrence, type nor payload sends the ids only", edit: func(c *schemas.DeliveryCommand) { c.Type = "" },
			priority: "high", ttl: time.Hour},
		{name: "the occurrence, the type and the producer's payload are in data",
			edit: func(c *schemas.DeliveryCommand) {
				c.OccurrenceID, c.Payload = occurrence, json.RawMessage(`{"invoice":"inv_2201"}`)
			},
			data: map[string]string{"occurrenceId": occurrence, "type": "invoice.paid", "payload": `{"invoice":"inv_2201"}`}, priority: "high", ttl: time.Hour},
		{name: "a configured priority is sent", cfg: fcm.Config{Priority: "normal"},
			data: map[string]string{"type": "invoice.paid"}, priority: "normal", ttl: time.Hour},
		{name: "the TTL is the time left, in whole seconds", edit: func(c *schemas.DeliveryCommand) {
			c.ExpiresAt = now.Add(90*time.Second + 999*time.Millisecond).UnixMilli()
		},
			data: map[string]string{"type": "invoice.paid"}, priority: "high", ttl: 90 * time.Second},
		{name: "an expiry already past sends a TTL of zero", edit: func(c *schemas.DeliveryCommand) { c.ExpiresAt = now.Add(-time.Minute).UnixMilli() },
			data: map[string]string{"type": "invoice.paid"}, priority: "high", ttl: 0},
		{name: "the TTL is capped at FCM's maximum of 28 days", edit: func(c *schemas.DeliveryCommand) { c.ExpiresAt = now.Add(40 * 24 * time.Hour).UnixMilli() },
			data: map[string]string{"type": "invoice.paid"}, priority: "high", ttl: 28 * 24 * time.Hour},
		{name: "the TTL is capped at the configured maximum", cfg: fcm.Config{MaxTTL: 10 * time.Minute},
			data: map[string]string{"type": "invoice.paid"}, priority: "high", ttl: 10 * time.Minute},
		{name: "a command without expiry sends no TTL and no apns-expiration", edit: func(c *schemas.DeliveryCommand) { c.ExpiresAt = 0 },
			data: map[string]string{"type": "invoice.paid"}, priority: "high", ttl: -1},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.Endpoint, tc.cfg.CredentialsJSON, tc.cfg.Now = em.URL()+"/v1", em.ServiceAccountJSON(), func() time.Time { return now }
			p, err := fcm.New(context.Background(), tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer p.CloseIdleConnections()
			cmd := command("fcm-token-message-" + strconv.Itoa(i))
			if tc.edit != nil {
				tc.edit(cmd)
			}
			m := p.Message(cmd, now)
			data := map[string]string{"id": nid, "deliveryId": cmd.DeliveryID}
			maps.Copy(data, tc.data)
			if m.Token != cmd.Token || !maps.Equal(m.Data, data) || m.Notification.Title != cmd.Title || m.Notification.Body != cmd.Body {
				t.Fatalf("token %q data %v notification %+v, want %q %v %q %q", m.Token, m.Data, *m.Notification, cmd.Token, data, cmd.Title, cmd.Body)
			}
			if m.Android.CollapseKey != nid || m.Android.Priority != tc.priority {
				t.Fatalf("android collapse_key %q priority %q, want %q %q", m.Android.CollapseKey, m.Android.Priority, nid, tc.priority)
			}
			headers := map[string]string{"apns-collapse-id": nid}
			if tc.ttl < 0 {
				if m.Android.TTL != nil {
					t.Fatalf("android ttl %v, want none", *m.Android.TTL)
				}
			} else {
				if m.Android.TTL == nil || *m.Android.TTL != tc.ttl {
					t.Fatalf("android ttl %v, want %v", m.Android.TTL, tc.ttl)
				}
				headers["apns-expiration"] = strconv.FormatInt(cmd.ExpiresAt/1000, 10)
			}
			if !maps.Equal(m.APNS.Headers, headers) {
				t.Fatalf("apns headers %v, want %v", m.APNS.Headers, headers)
			}
		})
	}
}
