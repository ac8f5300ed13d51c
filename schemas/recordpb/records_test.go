package recordpb_test

import (
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/heraldhq/herald/schemas/recordpb"
)

// The generated code is committed; this test fails when records.proto's
// fields are edited without running go generate.
func TestTheGeneratedCodeMatchesRecordsProto(t *testing.T) {
	src, err := os.ReadFile("records.proto")
	if err != nil {
		t.Fatal(err)
	}
	text := string(src)
	fieldRE := regexp.MustCompile(`(?m)^\s*(repeated\s+)?(\w+)\s+(\w+)\s*=\s*(\d+);`)
	for _, m := range []proto.Message{&recordpb.Request{}, &recordpb.Decision{}, &recordpb.DecisionDelivery{}, &recordpb.Accepted{}} {
		desc := m.ProtoReflect().Descriptor()
		name := string(desc.Name())
		t.Run(name+" has the fields records.proto gives it", func(t *testing.T) {
			start := strings.Index(text, "message "+name+" {")
			if start < 0 {
				t.Fatalf("records.proto has no message %s", name)
			}
			body := text[start : start+strings.Index(text[start:], "\n}")]
			var inProto []string
			for _, f := range fieldRE.FindAllStringSubmatch(body, -1) {
				inProto = append(inProto, strings.TrimSpace(f[1])+" "+f[2]+" "+f[3]+" "+f[4])
			}
			var generated []string
			fields := desc.Fields()
			for i := range fields.Len() {
				f := fields.Get(i)
				typ := f.Kind().String()
				if f.Message() != nil {
					typ = string(f.Message().Name())
				}
				repeated := ""
				if f.IsList() {
					repeated = "repeated"
				}
				generated = append(generated, repeated+" "+typ+" "+string(f.Name())+" "+strconv.Itoa(int(f.Number())))
			}
			sort.Strings(inProto)
			sort.Strings(generated)
			if strings.Join(inProto, "\n") != strings.Join(generated, "\n") {
				t.Fatalf("records.proto's %s:\n%s\ngenerated code's:\n%s\nrun go generate ./schemas/recordpb", name, strings.Join(inProto, "\n"), strings.Join(generated, "\n"))
			}
		})
	}
}
