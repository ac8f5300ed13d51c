package seenpb_test

import (
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/heraldhq/herald/internal/prototest"
	"github.com/heraldhq/herald/schemas/seenpb"
)

// The generated code is committed; this test fails when seen.proto's
// fields or enum values are edited without running go generate.
func TestTheGeneratedCodeMatchesSeenProto(t *testing.T) {
	prototest.CheckGenerated(t, "seen.proto", []proto.Message{&seenpb.SeenEntry{}, &seenpb.SeenBatch{}}, []protoreflect.EnumDescriptor{seenpb.Kind(0).Descriptor()})
}
