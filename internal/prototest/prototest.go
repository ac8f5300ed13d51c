// Package prototest checks, in tests, that the Go code generated from a
// .proto file matches that file. herald commits its generated code
// (schemas/seenpb, schemas/recordpb); a field or enum value edited in the
// .proto file without `go generate` would otherwise go unnoticed until a
// reader in another language disagreed with herald about a record.
package prototest

import (
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

var (
	fieldRE = regexp.MustCompile(`(?m)^\s*(repeated\s+)?(\w+)\s+(\w+)\s*=\s*(\d+);`)
	valueRE = regexp.MustCompile(`(?m)^\s*(\w+)\s*=\s*(\d+);`)
)

// CheckGenerated fails t unless every message in msgs has exactly the
// fields (label, type, name, number) its declaration in protoFile gives
// it, and every enum in enums exactly its values. The .proto file is read
// as text: one declaration per line, as herald writes them.
func CheckGenerated(t *testing.T, protoFile string, msgs []proto.Message, enums []protoreflect.EnumDescriptor) {
	t.Helper()
	src, err := os.ReadFile(protoFile)
	if err != nil {
		t.Fatal(err)
	}
	text := string(src)
	body := func(kind, name string) string {
		start := strings.Index(text, kind+" "+name+" {")
		if start < 0 {
			t.Fatalf("%s has no %s %s", protoFile, kind, name)
		}
		return text[start : start+strings.Index(text[start:], "\n}")]
	}
	for _, m := range msgs {
		desc := m.ProtoReflect().Descriptor()
		var inProto, generated []string
		for _, f := range fieldRE.FindAllStringSubmatch(body("message", string(desc.Name())), -1) {
			inProto = append(inProto, strings.TrimSpace(f[1])+" "+f[2]+" "+f[3]+" "+f[4])
		}
		fields := desc.Fields()
		for i := range fields.Len() {
			f := fields.Get(i)
			typ := f.Kind().String()
			switch {
			case f.Message() != nil:
				typ = string(f.Message().Name())
			case f.Enum() != nil:
				typ = string(f.Enum().Name())
			}
			label := ""
			if f.IsList() {
				label = "repeated"
			}
			generated = append(generated, label+" "+typ+" "+string(f.Name())+" "+strconv.Itoa(int(f.Number())))
		}
		sort.Strings(inProto)
		sort.Strings(generated)
		if strings.Join(inProto, "\n") != strings.Join(generated, "\n") {
			t.Errorf("%s's %s:\n%s\ngenerated code's:\n%s\nrun go generate in its directory", protoFile, desc.Name(),
				strings.Join(inProto, "\n"), strings.Join(generated, "\n"))
		}
	}
	for _, e := range enums {
		var inProto, generated []string
		for _, v := range valueRE.FindAllStringSubmatch(body("enum", string(e.Name())), -1) {
			inProto = append(inProto, v[1]+"="+v[2])
		}
		for i := range e.Values().Len() {
			v := e.Values().Get(i)
			generated = append(generated, string(v.Name())+"="+strconv.Itoa(int(v.Number())))
		}
		if strings.Join(inProto, ",") != strings.Join(generated, ",") {
			t.Errorf("%s's %s: %v, generated code's: %v; run go generate in its directory", protoFile, e.Name(), inProto, generated)
		}
	}
}
