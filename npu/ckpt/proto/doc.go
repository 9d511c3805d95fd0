// Package ckptpb provides the generated Go types for MindSpore's checkpoint
// protobuf schema (checkpoint.proto in this directory): Checkpoint, its
// Value entries and TensorProto. Package ckpt wraps them in plain Go types;
// use this package only to look at the raw messages.
package ckptpb

//go:generate protoc --proto_path=. --go_out=. --go_opt=paths=source_relative checkpoint.proto
