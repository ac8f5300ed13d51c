package recordpb_test

import (
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/heraldhq/herald/internal/prototest"
	"github.com/heraldhq/herald/schemas/recordpb"
)

// The generated code is committed; this test fails when records.proto's
// fields are edited without running go generate.
func TestTheGeneratedCodeMatchesRecordsProto(t *testing.T) {
	prototest.CheckGenerated(t, "records.proto",
		[]proto.Message{&recordpb.Request{}, &recordpb.Decision{}, &recordpb.DecisionDelivery{}, &recordpb.Accepted{}}, nil)
}
