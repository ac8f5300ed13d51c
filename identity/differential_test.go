package identity

import (
	"bytes"
	"encoding/base64"
	"maps"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// diffCase is one input to both implementations.
type diffCase struct {
	typ, recipient string
	key            Key
	// names is the member order written for Node (random, so JavaScript's
	// insertion order is exercised too).
	names []string
	// dropProto adds a "__proto__" member that only Node sees: the reference
	// drops it, so the id must equal Go's id without it.
	dropProto bool
}

// TestNotificationIDMatchesNodeReference runs the seed JavaScript function
// (testdata/canonical.js) in one Node process over thousands of random
// cases and compares every id and every hashed byte with Go's.
func TestNotificationIDMatchesNodeReference(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		if testing.Short() {
			t.Skip("node is not on PATH: skipping the differential test against JavaScript (required without -short)")
		}
		t.Fatal("node is not on PATH: the differential test against JavaScript's JSON.stringify needs Node.js (run with -short to skip it)")
	}

	r := rand.New(rand.NewPCG(20260918, 1))
	cases := []diffCase{
		{typ: "invoice.paid", recipient: "u_8831", key: Key{"invoice": String("inv_2201")}},
		{typ: "t", recipient: "r", key: Key{}},
		{typ: "t", recipient: "r", key: Key{"a": String("b")}, dropProto: true},
	}
	for range 3000 {
		cases = append(cases, diffCase{
			typ:       randString(r, 5),
			recipient: randString(r, 5),
			key:       randKey(r, 6, false),
		})
	}
	// Every name around the array-index boundary and the UTF-16 sort
	// boundary in one key.
	all := Key{}
	for i, name := range indexLike {
		all[name] = Number(float64(i))
	}
	for i, p := range pieces {
		all["k"+p] = Number(float64(i))
	}
	cases = append(cases, diffCase{typ: "all", recipient: "names", key: all})
	// Every special number.
	nums := Key{}
	for i, f := range specialNumbers {
		nums["n"+string(rune('A'+i))] = Number(f)
	}
	cases = append(cases, diffCase{typ: "all", recipient: "numbers", key: nums})

	var in strings.Builder
	for i := range cases {
		c := &cases[i]
		c.names = slices.Collect(maps.Keys(c.key))
		r.Shuffle(len(c.names), func(a, b int) { c.names[a], c.names[b] = c.names[b], c.names[a] })
		in.WriteString(`{"t":`)
		jsonASCII(&in, c.typ)
		in.WriteString(`,"r":`)
		jsonASCII(&in, c.recipient)
		in.WriteString(`,"k":`)
		var k strings.Builder
		keyJSON(&k, c.key, c.names)
		text := k.String()
		if c.dropProto {
			text = `{"__proto__":"x",` + text[1:]
		}
		in.WriteString(text)
		in.WriteString("}\n")
	}
	file := filepath.Join(t.TempDir(), "cases.jsonl")
	if err := os.WriteFile(file, []byte(in.String()), 0o600); err != nil {
		t.Fatal(err)
	}

	cmd := exec.CommandContext(t.Context(), node, filepath.Join("testdata", "canonical.js"), file)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node testdata/canonical.js: %v\n%s", err, stderr.String())
	}
	lines := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	if len(lines) != len(cases) {
		t.Fatalf("node wrote %d lines for %d cases", len(lines), len(cases))
	}

	failures := 0
	for i, c := range cases {
		wantID, wantB64, _ := strings.Cut(lines[i], "\t")
		want, err := base64.StdEncoding.DecodeString(wantB64)
		if err != nil {
			t.Fatalf("case %d: node output %q: %v", i, lines[i], err)
		}
		canon, err := CanonicalJSON(c.typ, c.recipient, c.key)
		if err != nil {
			t.Fatalf("case %d: CanonicalJSON(%q, %q, %#v): %v", i, c.typ, c.recipient, c.key, err)
		}
		id, err := NotificationID(c.typ, c.recipient, c.key)
		if err != nil {
			t.Fatalf("case %d: NotificationID: %v", i, err)
		}
		canonKey, err := c.key.MarshalJSON()
		if err != nil {
			t.Fatalf("case %d: MarshalJSON: %v", i, err)
		}
		if ofCanonical, err := NotificationIDOfCanonicalKey(c.typ, c.recipient, canonKey); err != nil || ofCanonical != id {
			t.Errorf("case %d: NotificationIDOfCanonicalKey(its MarshalJSON) = %s, %v; NotificationID = %s", i, ofCanonical, err, id)
		}
		if !bytes.Equal(canon, want) || id != wantID {
			failures++
			t.Errorf("case %d: key %#v\n  go:   %s %q\n  node: %s %q", i, c.key, id, canon, wantID, want)
			if failures >= 10 {
				t.Fatal("too many mismatches")
			}
			continue
		}
		// The same key read from the JSON text Node read must give the same
		// id; non-finite numbers have no JSON spelling.
		if c.dropProto || !finite(c.key) {
			continue
		}
		var k strings.Builder
		keyJSON(&k, c.key, c.names)
		parsedID, err := NotificationIDFromJSON(c.typ, c.recipient, k.String())
		if err != nil {
			t.Fatalf("case %d: NotificationIDFromJSON(%s): %v", i, k.String(), err)
		}
		if parsedID != id {
			t.Errorf("case %d: the key parsed from %s gives %s, want %s", i, k.String(), parsedID, id)
		}
	}
	t.Logf("%d cases agree with Node %s", len(cases), nodeVersion(node))
}

func finite(k Key) bool {
	for _, v := range k {
		if f, ok := v.AsNumber(); ok && (math.IsNaN(f) || math.IsInf(f, 0)) {
			return false
		}
	}
	return true
}

func nodeVersion(node string) string {
	out, err := exec.Command(node, "--version").Output()
	if err != nil {
		return "(unknown version)"
	}
	return strings.TrimSpace(string(out))
}
