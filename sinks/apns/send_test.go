package apns_test

import (
	"context"
	"encoding/json"
	"reflect"
	"strconv"
	"testing"

	"github.com/heraldhq/herald/identity"
	"github.com/heraldhq/herald/schemas"
	"github.com/heraldhq/herald/sinks"
	"github.com/heraldhq/herald/sinks/apns"
	"github.com/heraldhq/herald/sinks/apns/emulator"
)

func TestEachPushCarriesTheIdsAndHeadersItsCommandAndConfigurationSay(t *testing.T) {
	em := startEmulator(t, emulator.Options{})
	occurrence := identity.OccurrenceID(command("").NotificationID, 1764590400000)
	cases := []struct {
		name string
		cfg  apns.Config
		edit func(*schemas.DeliveryCommand)
		// want, from the command as edited
		apnsID, collapseID, pushType, priority string
		expires                                bool
	}{
		{name: "without configuration the push is an alert at priority 10",
			pushType: "alert", priority: "10", expires: true},
		{name: "a configured priority and push type are sent", cfg: apns.Config{Priority: 5, PushType: "background"},
			pushType: "background", priority: "5", expires: true},
		{name: "a command without apns-id or collapse id gets the apns-id of its occurrence and the notification id as collapse id",
			edit:   func(c *schemas.DeliveryCommand) { c.APNsID, c.CollapseID, c.OccurrenceID = "", "", occurrence },
			apnsID: identity.APNsID(occurrence), collapseID: command("").NotificationID, pushType: "alert", priority: "10", expires: true},
		{name: "a command without apns-id or occurrence gets the apns-id of its notification",
			edit:   func(c *schemas.DeliveryCommand) { c.APNsID = "" },
			apnsID: identity.APNsID(command("").NotificationID), pushType: "alert", priority: "10", expires: true},
		{name: "the command's own apns-id and collapse id are sent as they are",
			edit: func(c *schemas.DeliveryCommand) {
				c.APNsID, c.CollapseID = "0f8fad5b-d9cb-469f-a165-70867728950e", "release-notes"
			},
			apnsID: "0f8fad5b-d9cb-469f-a165-70867728950e", collapseID: "release-notes", pushType: "alert", priority: "10", expires: true},
		{name: "a command without expiry is sent without apns-expiration",
			edit:     func(c *schemas.DeliveryCommand) { c.ExpiresAt = 0 },
			pushType: "alert", priority: "10"},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := provider(t, em, tc.cfg)
			token := "tok-headers-" + strconv.Itoa(i)
			cmd := command(token)
			if tc.edit != nil {
				tc.edit(cmd)
			}
			if tc.apnsID == "" {
				tc.apnsID = cmd.APNsID
			}
			if tc.collapseID == "" {
				tc.collapseID = cmd.CollapseID
			}
			n, err := p.Notification(cmd)
			if err != nil {
				t.Fatal(err)
			}
			if n.Expiration.IsZero() == tc.expires {
				t.Fatalf("the notification's expiration is %v for a command expiring at %d", n.Expiration, cmd.ExpiresAt)
			}
			if res := p.Send(context.Background(), cmd); res.Class != sinks.Success {
				t.Fatalf("send: %v %q (%v)", res.Class, res.Rule, res.Err)
			}
			var push emulator.Push
			for _, r := range em.Received() {
				if r.Token == token {
					push = r
				}
			}
			expiration := ""
			if tc.expires {
				expiration = strconv.FormatInt(cmd.ExpiresAt/1000, 10)
			}
			want := emulator.Push{Token: token, APNsID: tc.apnsID, CollapseID: tc.collapseID, PushType: tc.pushType,
				Topic: "com.example.app", Priority: tc.priority, Expiration: expiration,
				NotificationID: cmd.NotificationID, DeliveryID: cmd.DeliveryID, Title: cmd.Title, Answer: "200"}
			push.At = want.At
			if push != want {
				t.Fatalf("push\n%+v\nwant\n%+v", push, want)
			}
		})
	}
}

func TestTheAppsPayloadCarriesTheNotificationAndTheProducersData(t *testing.T) {
	_, p := start(t)
	cmd := command("tok-payload")
	cmd.Payload = json.RawMessage(`{"invoice":"inv_2201"}`)
	n, err := p.Notification(cmd)
	if err != nil {
		t.Fatal(err)
	}
	var got apns.Payload
	if err := json.Unmarshal(n.Payload.([]byte), &got); err != nil {
		t.Fatalf("payload %s: %v", n.Payload, err)
	}
	want := apns.Payload{
		APS:    apns.APS{Alert: apns.Alert{Title: cmd.Title, Body: cmd.Body}, ThreadID: cmd.Type},
		Herald: apns.Herald{ID: cmd.NotificationID, DeliveryID: cmd.DeliveryID, Type: cmd.Type, Data: cmd.Payload},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("payload %+v, want %+v", got, want)
	}
}

func TestACommandAPNsCannotBeGivenIsPermanentAndNeverSent(t *testing.T) {
	em, p := start(t)
	cases := []struct {
		name string
		edit func(*schemas.DeliveryCommand)
	}{
		{"a notification id that is no id, without a collapse id", func(c *schemas.DeliveryCommand) { c.NotificationID, c.CollapseID = "not-an-id", "" }},
		{"a producer payload that is not JSON", func(c *schemas.DeliveryCommand) { c.Payload = json.RawMessage(`{"unterminated`) }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cmd := command("tok-refused")
			tc.edit(cmd)
			res := p.Send(context.Background(), cmd)
			if res.Class != sinks.Permanent || res.Rule != "bad_request" || res.RetireDevice || res.Err == nil {
				t.Fatalf("got %v %q retire %v (%v), want permanent bad_request keeping the device", res.Class, res.Rule, res.RetireDevice, res.Err)
			}
			if n := em.Total(); n != 0 {
				t.Fatalf("the emulator read %d pushes", n)
			}
		})
	}
}
