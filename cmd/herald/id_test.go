package main

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
)

func TestIDCommand(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{
			name: "the design vector prints its id and a newline",
			args: []string{"--type", "invoice.paid", "--recipient", "u_8831", "--key", `{"invoice":"inv_2201"}`},
			want: "52f364d9288c640b306b566e509104bd\n",
		},
		{
			name: "a key is read as JavaScript reads it",
			args: []string{"--type=invoice.paid", "--recipient=u_8831", `--key={ "invoice" : "inv_2201" }`},
			want: "52f364d9288c640b306b566e509104bd\n",
		},
		{
			name: "the empty key is spelled {}",
			args: []string{"--type", "welcome", "--recipient", "u_1", "--key", "{}"},
			want: "6bc1fb6a4ef0de06b12d6ee6d0db90b8\n",
		},
		{
			name: "a dedupe key prints the derived dedupe id",
			args: []string{"--tenant", "acme", "--type", "invoice.paid", "--recipient", "u_8831", "--dedupe-key", "dk-1"},
			want: "d260c84390686d426cb7afb20052480f\n",
		},
		{
			name: "an idempotency key prints the derived idempotency id",
			args: []string{"--tenant", "acme", "--type", "invoice.paid", "--recipient", "u_8831", "--idempotency-key", "ik-1"},
			want: "bc028f72eb509950f274e50ea45f1c39\n",
		},
		{
			name: "a dedupe key wins over an idempotency key",
			args: []string{"--tenant", "acme", "--type", "invoice.paid", "--recipient", "u_8831", "--dedupe-key", "dk-1", "--idempotency-key", "ik-1"},
			want: "d260c84390686d426cb7afb20052480f\n",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			if code := run(t.Context(), append([]string{"id"}, tt.args...), &out, &errOut); code != 0 {
				t.Fatalf("exit %d, stderr %q", code, errOut.String())
			}
			if out.String() != tt.want {
				t.Errorf("stdout = %q, want %q", out.String(), tt.want)
			}
			if errOut.Len() != 0 {
				t.Errorf("stderr = %q, want nothing", errOut.String())
			}
		})
	}
}

func TestIDCommandUsageErrors(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"a missing --type is named", []string{"--recipient", "u_8831", "--key", "{}"}, "missing --type"},
		{"a missing --recipient is named", []string{"--type", "invoice.paid", "--key", "{}"}, "missing --recipient"},
		{"a missing --key is named", []string{"--type", "invoice.paid", "--recipient", "u_8831"}, "missing --key"},
		{"a missing --tenant is named with a dedupe key", []string{"--type", "t", "--recipient", "r", "--dedupe-key", "d"}, "missing --tenant"},
		{"--key and --dedupe-key are exclusive", []string{"--tenant", "x", "--type", "t", "--recipient", "r", "--key", "{}", "--dedupe-key", "d"}, "--key cannot be combined"},
		{"--tenant alone is refused because the notification id ignores it", []string{"--tenant", "x", "--type", "t", "--recipient", "r", "--key", "{}"}, "--tenant applies only"},
		{"a nested key value names its member", []string{"--type", "t", "--recipient", "r", "--key", `{"inv":{"id":1}}`}, `member "inv" is an object`},
		{"a malformed key is refused", []string{"--type", "t", "--recipient", "r", "--key", `{"a":1`}, "--key: identity: key:"},
		{"a stray argument is refused", []string{"--type", "t", "--recipient", "r", "--key", "{}", "extra"}, `unexpected argument "extra"`},
		{"an unknown flag is refused", []string{"--typo", "t"}, "flag provided but not defined"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := runID(t.Context(), tt.args, io.Discard)
			if !errors.Is(err, errUsage) {
				t.Fatalf("runID = %v, want an error wrapping errUsage", err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("runID error %q does not contain %q", err, tt.want)
			}

			var out, errOut bytes.Buffer
			if code := run(t.Context(), append([]string{"id"}, tt.args...), &out, &errOut); code != 2 {
				t.Errorf("exit %d, want 2", code)
			}
			if out.Len() != 0 {
				t.Errorf("stdout = %q, want nothing", out.String())
			}
			if !strings.Contains(errOut.String(), tt.want) {
				t.Errorf("stderr %q does not contain %q", errOut.String(), tt.want)
			}
		})
	}
}

func TestIDCommandEnvironment(t *testing.T) {
	t.Run("HERALD_TENANT from the environment does not block a notification id", func(t *testing.T) {
		t.Setenv("HERALD_TENANT", "acme")
		var out bytes.Buffer
		err := runID(t.Context(), []string{"--type", "invoice.paid", "--recipient", "u_8831", "--key", `{"invoice":"inv_2201"}`}, &out)
		if err != nil || out.String() != "52f364d9288c640b306b566e509104bd\n" {
			t.Errorf("runID = %q, %v", out.String(), err)
		}
	})
	t.Run("HERALD_TENANT from the environment serves a dedupe id", func(t *testing.T) {
		t.Setenv("HERALD_TENANT", "acme")
		var out bytes.Buffer
		err := runID(t.Context(), []string{"--type", "invoice.paid", "--recipient", "u_8831", "--dedupe-key", "dk-1"}, &out)
		if err != nil || out.String() != "d260c84390686d426cb7afb20052480f\n" {
			t.Errorf("runID = %q, %v", out.String(), err)
		}
	})
}
