package schemas_test

import (
	"errors"
	"testing"

	"github.com/heraldhq/herald/schemas"
)

func TestADeviceKeyAlwaysStartsWithItsRecipientKey(t *testing.T) {
	// Empty names are not valid ids, but the prefix must hold for them too:
	// a partitioner that hashed the wrong prefix would split a recipient's
	// devices from its notifications.
	for _, c := range []struct{ tenant, recipient, device string }{
		{"acme", "u_1", "d1"}, {"", "u_1", "d1"}, {"acme", "", "d1"}, {"acme", "u_1", ""}, {"", "", ""}, {"a/b", "c/d", "e/f"},
	} {
		t.Run("tenant "+c.tenant+", recipient "+c.recipient+", device "+c.device, func(t *testing.T) {
			want := schemas.RecipientKey(c.tenant, c.recipient)
			if got := schemas.RecipientPrefix(schemas.DeviceKey(c.tenant, c.recipient, c.device)); got != want {
				t.Fatalf("RecipientPrefix(DeviceKey) = %q, want the recipient key %q", got, want)
			}
			if got := schemas.RecipientPrefix(want); got != want {
				t.Fatalf("RecipientPrefix(%q) = %q, want it unchanged", want, got)
			}
		})
	}
	t.Run("a key without a slash is its own prefix", func(t *testing.T) {
		if got := schemas.RecipientPrefix("plain"); got != "plain" {
			t.Fatalf("RecipientPrefix(plain) = %q", got)
		}
	})
}

func TestSeenKeysOfTheTwoKindsNeverMeet(t *testing.T) {
	d, i := schemas.SeenKey(schemas.SeenDedupe, "0a1b"), schemas.SeenKey(schemas.SeenIdempotency, "0a1b")
	if d != "dedupe/0a1b" || i != "idem/0a1b" {
		t.Fatalf("seen keys %q and %q, want dedupe/0a1b and idem/0a1b", d, i)
	}
}

func TestEncodeNamesTheSchemaOrRefuses(t *testing.T) {
	t.Run("a pointer whose schema names another record is refused", func(t *testing.T) {
		if b, err := schemas.Encode(&schemas.Request{Schema: schemas.DecisionV1, Type: "t"}); !errors.Is(err, schemas.ErrSchema) {
			t.Fatalf("Encode = %s, %v; want ErrSchema", b, err)
		}
	})
	t.Run("a value whose schema names another record is refused", func(t *testing.T) {
		if b, err := schemas.Encode(schemas.Request{Schema: schemas.DecisionV1, Type: "t"}); !errors.Is(err, schemas.ErrSchema) {
			t.Fatalf("Encode = %s, %v; want ErrSchema", b, err)
		}
	})
	t.Run("a nil pointer is an error, not a panic", func(t *testing.T) {
		if b, err := schemas.Encode((*schemas.Request)(nil)); err == nil {
			t.Fatalf("Encode(nil) = %s, want an error", b)
		}
	})
	t.Run("an empty schema is named, by pointer or by value", func(t *testing.T) {
		for _, r := range []schemas.Record{&schemas.Request{Type: "t"}, schemas.Request{Type: "t"}} {
			b, err := schemas.Encode(r)
			if err != nil {
				t.Fatal(err)
			}
			var back schemas.Request
			if err := schemas.Decode(b, &back); err != nil || back.Type != "t" {
				t.Fatalf("Decode(%s) = %+v, %v", b, back, err)
			}
		}
	})
}
