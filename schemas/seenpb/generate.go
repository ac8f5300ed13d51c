// Package seenpb is the generated Go code of herald.seen/v2 (seen.proto in
// this directory): the binary seen-set entry the dedupe stage writes to
// herald.seen. seen.pb.go comes from protoc-gen-go, seen_vtproto.pb.go from
// protoc-gen-go-vtproto (marshalling and unmarshalling without reflection;
// UnmarshalVTUnsafe leaves the decoded bytes and strings pointing into
// the input). Use it through package schemas (SeenEntry, DecodeSeen,
// AppendSeenV2) unless speed needs the message itself, as the dedupe
// stage's restore does.
//
// Regenerate after changing seen.proto (buf is fetched from the Go module
// proxy at the pinned version; the plugins are go.mod tools):
//
//go:generate go run github.com/bufbuild/buf/cmd/buf@v1.75.0 generate
package seenpb
