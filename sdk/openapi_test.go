package sdk_test

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/heraldhq/herald/api"
	"github.com/heraldhq/herald/sdk"
)

// TestGoTypesMatchTheOpenAPISchemas is the Go SDK's drift check (the Node
// and Python SDKs' types are generated, checked by sdk/gen's test): each
// wire type's JSON members are its schema's properties, of the same JSON
// type, and every property the schema requires is a member.
func TestGoTypesMatchTheOpenAPISchemas(t *testing.T) {
	var doc struct {
		Components struct {
			Schemas map[string]schema `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(api.OpenAPI(), &doc); err != nil {
		t.Fatal(err)
	}
	schemas := doc.Components.Schemas
	pairs := []struct {
		schemas []string // several: the union of their properties (a oneOf)
		v       any
	}{
		{[]string{"SendRequest"}, sdk.Notification{}},
		{[]string{"Target"}, sdk.Target{}},
		{[]string{"SendResult"}, sdk.SendResult{}},
		{[]string{"NotificationStatus"}, sdk.NotificationStatus{}},
		{[]string{"Delivery"}, sdk.Delivery{}},
		{[]string{"Skipped"}, sdk.Skipped{}},
		{[]string{"Explanation"}, sdk.Explanation{}},
		{[]string{"ExplainedNotification"}, sdk.ExplainedNotification{}},
		{[]string{"ExplainedDevice"}, sdk.ExplainedDevice{}},
		{[]string{"NotificationRecord"}, sdk.NotificationRecord{}},
		{[]string{"TimelineEvent"}, sdk.TimelineEvent{}},
		{[]string{"MobileDeviceRegistration", "WebDeviceRegistration", "EmailDeviceRegistration"}, sdk.DeviceRegistration{}},
		{[]string{"Device"}, sdk.Device{}},
		{[]string{"DeviceList"}, sdk.DeviceList{}},
		{[]string{"QuietHours"}, sdk.QuietHours{}},
		{[]string{"PreferencesUpdate"}, sdk.PreferencesUpdate{}},
		{[]string{"Preferences"}, sdk.Preferences{}},
		{[]string{"SegmentUpdate"}, sdk.SegmentUpdate{}},
		{[]string{"Segment"}, sdk.Segment{}},
		{[]string{"WebhookUpdate"}, sdk.WebhookUpdate{}},
		{[]string{"Webhook"}, sdk.Webhook{}},
		{[]string{"WebhookList"}, sdk.WebhookList{}},
		{[]string{"ReceiptResult"}, sdk.ReceiptResult{}},
		{[]string{"Problem"}, sdk.Problem{}},
		{[]string{"FieldError"}, sdk.FieldError{}},
	}
	for _, p := range pairs {
		rt := reflect.TypeOf(p.v)
		t.Run("sdk."+rt.Name()+" is "+strings.Join(p.schemas, " or "), func(t *testing.T) {
			props := map[string]schema{}
			required := map[string]bool{}
			for i, name := range p.schemas {
				s, ok := schemas[name]
				if !ok {
					t.Fatalf("no schema %s", name)
				}
				for k, v := range s.Properties {
					props[k] = v
				}
				for _, r := range s.Required {
					if i == 0 || required[r] {
						required[r] = true
					}
				}
			}
			members := map[string]bool{}
			for i := 0; i < rt.NumField(); i++ {
				f := rt.Field(i)
				name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
				if name == "-" || !f.IsExported() {
					continue
				}
				members[name] = true
				s, ok := props[name]
				if !ok {
					t.Errorf("%s has no property %q", strings.Join(p.schemas, "/"), name)
					continue
				}
				if want := jsonKind(f.Type); s.Type != "" && want != "" && s.Type != want && !(want == "number" && s.Type == "integer") {
					t.Errorf("%s.%s is %s in the schema, %s (%s) in Go", p.schemas[0], name, s.Type, want, f.Type)
				}
			}
			for r := range required {
				if !members[r] {
					t.Errorf("the schema requires %q, which sdk.%s lacks", r, rt.Name())
				}
			}
		})
	}
}

type schema struct {
	Type       string            `json:"type"`
	Properties map[string]schema `json:"properties"`
	Required   []string          `json:"required"`
}

func (s *schema) UnmarshalJSON(b []byte) error {
	var raw struct {
		Type       json.RawMessage   `json:"type"`
		Properties map[string]schema `json:"properties"`
		Required   []string          `json:"required"`
		Ref        string            `json:"$ref"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	s.Properties, s.Required = raw.Properties, raw.Required
	_ = json.Unmarshal(raw.Type, &s.Type) // a list of types stays ""
	if raw.Ref != "" {
		s.Type = "object"
	}
	return nil
}

// jsonKind is the JSON type a Go type encodes as ("" when it can be any).
func jsonKind(t reflect.Type) string {
	if t == reflect.TypeOf(json.RawMessage(nil)) || t == reflect.TypeOf(sdk.Key(nil)) {
		return ""
	}
	if t == reflect.TypeOf(time.Time{}) {
		return "string" // RFC 3339
	}
	switch t.Kind() {
	case reflect.String:
		return "string"
	case reflect.Bool:
		return "boolean"
	case reflect.Int, reflect.Int64, reflect.Int32:
		return "integer"
	case reflect.Float64:
		return "number"
	case reflect.Slice:
		return "array"
	case reflect.Map, reflect.Struct:
		return "object"
	case reflect.Pointer:
		return jsonKind(t.Elem())
	}
	return ""
}
