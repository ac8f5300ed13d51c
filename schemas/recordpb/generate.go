// Package recordpb is the generated Go code of herald.request/v2,
// herald.decision/v2 and herald.accepted/v2 (records.proto in this
// directory). records.pb.go comes from protoc-gen-go,
// records_vtproto.pb.go from protoc-gen-go-vtproto (marshalling and
// unmarshalling without reflection; UnmarshalVTUnsafe leaves the decoded
// bytes and strings pointing into the input). Use it through package
// schemas (Request, Decision, Accepted and Encoder/Decoder).
//
// Regenerate after changing records.proto (buf is fetched from the Go
// module proxy at the pinned version; the plugins are go.mod tools):
//
//go:generate go run github.com/bufbuild/buf/cmd/buf@v1.75.0 generate
package recordpb
