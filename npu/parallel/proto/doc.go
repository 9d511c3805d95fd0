// Package straspb provides the generated Go types of MindSpore's parallel
// strategy file schema (node_strategy.proto in this directory, protobuf
// package mindspore.straspb): ParallelStrategyMap with its operator
// strategies and parameter layouts. Package parallel reads and writes
// strategy files through plain Go types (parallel.StrategyFile); use this
// package only to look at the raw messages.
//
// Edit node_strategy.proto, then run `go generate` in this directory; it
// needs protoc and protoc-gen-go on PATH.
package straspb

//go:generate protoc --proto_path=. --go_out=. --go_opt=paths=source_relative node_strategy.proto
