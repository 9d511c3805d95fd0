// Package stagev1 provides the generated Go code of the mspipe stage plugin
// protocol, version 1, defined in stage.proto.
//
// Edit stage.proto, then run `go generate` in this directory; it needs protoc,
// protoc-gen-go and protoc-gen-go-grpc on PATH (go install puts the two
// generators in $(go env GOPATH)/bin).
package stagev1

//go:generate protoc --proto_path=. --go_out=. --go_opt=paths=source_relative --go-grpc_out=. --go-grpc_opt=paths=source_relative stage.proto
