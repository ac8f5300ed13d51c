package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/heraldhq/herald/schemas"
)

func TestDecodeSeenPrintsEitherVersionAsJSON(t *testing.T) {
	e := schemas.SeenEntry{Kind: schemas.SeenDedupe, Scope: "0123456789abcdef0123456789abcdef", NotificationID: "fedcba9876543210fedcba9876543210",
		RequestID: "call #1", Outcome: schemas.DecisionAccepted, FirstAt: 1_764_500_000_000, ExpiresAt: 1_764_500_600_000, SourcePartition: 2, SourceOffset: 41}
	v2, err := schemas.AppendSeenV2(nil, &e)
	if err != nil {
		t.Fatal(err)
	}
	v1, err := schemas.Encode(&e)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, schema string
		value        []byte
	}{{"a herald.seen/v2 value is printed with its ids in hex", schemas.SeenEntryV2, v2}, {"a JSON value is printed as it reads", schemas.SeenEntryV1, v1}} {
		t.Run(c.name, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "value")
			if err := os.WriteFile(file, c.value, 0o600); err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			if err := runDecode(t.Context(), []string{"seen", "--file", file}, &out); err != nil {
				t.Fatal(err)
			}
			var got schemas.SeenEntry
			if err := json.Unmarshal(out.Bytes(), &got); err != nil {
				t.Fatalf("%v in %s", err, out.String())
			}
			want := e
			want.Schema = c.schema
			if got != want {
				t.Fatalf("printed %+v, want %+v", got, want)
			}
		})
	}
}

func TestDecodeSeenUsageErrors(t *testing.T) {
	garbage := filepath.Join(t.TempDir(), "garbage")
	if err := os.WriteFile(garbage, []byte{0x08, 0x05}, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"no record is named", nil, "want 'herald decode seen'"},
		{"another record is refused", []string{"decision"}, "want 'herald decode seen'"},
		{"a value that is not a seen entry is named by its size", []string{"seen", "--file", garbage}, "2 bytes are not a herald.seen entry"},
		{"a stray argument is refused", []string{"seen", "--file", garbage, "extra"}, `unexpected argument "extra"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := runDecode(t.Context(), c.args, new(bytes.Buffer))
			if !errors.Is(err, errUsage) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want a usage error containing %q", err, c.want)
			}
		})
	}
	t.Run("a missing file is named", func(t *testing.T) {
		err := runDecode(t.Context(), []string{"seen", "--file", filepath.Join(t.TempDir(), "none")}, new(bytes.Buffer))
		if err == nil || !strings.Contains(err.Error(), "read --file") {
			t.Fatalf("error %v", err)
		}
	})
}
