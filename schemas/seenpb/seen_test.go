package seenpb_test

import (
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/heraldhq/herald/schemas/seenpb"
)

// The generated code is committed; this test fails when seen.proto's
// fields or enum values are edited without running go generate.
func TestTheGeneratedCodeMatchesSeenProto(t *testing.T) {
	src, err := os.ReadFile("seen.proto")
	if err != nil {
		t.Fatal(err)
	}
	text := string(src)
	body := func(kind, name string) string {
		start := strings.Index(text, kind+" "+name+" {")
		if start < 0 {
			t.Fatalf("seen.proto has no %s %s", kind, name)
		}
		end := strings.Index(text[start:], "\n}")
		return text[start : start+end]
	}
	fieldRE := regexp.MustCompile(`(?m)^\s*(\w+)\s+(\w+)\s*=\s*(\d+);`)
	var inProto []string
	for _, m := range fieldRE.FindAllStringSubmatch(body("message", "SeenEntry"), -1) {
		inProto = append(inProto, m[1]+" "+m[2]+" "+m[3])
	}
	var generated []string
	fields := (&seenpb.SeenEntry{}).ProtoReflect().Descriptor().Fields()
	for i := range fields.Len() {
		f := fields.Get(i)
		typ := f.Kind().String()
		if f.Kind() == protoreflect.EnumKind {
			typ = string(f.Enum().Name())
		}
		generated = append(generated, typ+" "+string(f.Name())+" "+strconv.Itoa(int(f.Number())))
	}
	sort.Strings(inProto)
	sort.Strings(generated)
	if strings.Join(inProto, "\n") != strings.Join(generated, "\n") {
		t.Fatalf("seen.proto's SeenEntry:\n%s\ngenerated code's:\n%s\nrun go generate ./schemas/seenpb", strings.Join(inProto, "\n"), strings.Join(generated, "\n"))
	}

	valueRE := regexp.MustCompile(`(?m)^\s*(\w+)\s*=\s*(\d+);`)
	var values, genValues []string
	for _, m := range valueRE.FindAllStringSubmatch(body("enum", "Kind"), -1) {
		values = append(values, m[1]+"="+m[2])
	}
	enum := seenpb.Kind(0).Descriptor().Values()
	for i := range enum.Len() {
		genValues = append(genValues, string(enum.Get(i).Name())+"="+strconv.Itoa(int(enum.Get(i).Number())))
	}
	if strings.Join(values, ",") != strings.Join(genValues, ",") {
		t.Fatalf("seen.proto's Kind: %v, generated code's: %v; run go generate ./schemas/seenpb", values, genValues)
	}
}
