// Command layers checks that the tree keeps its layers: which packages may
// depend, directly or through others, on which. The rules are the table
// [rules] in rules.go; `go test ./tools/layers` fails on any package that
// breaks one, and the command prints the same list:
//
//	go run ./tools/layers         # exit 1 and one line a broken rule
//
// The dependencies are those `go list -deps` reports for the non-test
// files of each package, so a test may reach across layers (tests build
// the binary, start plugins, simulate clusters); the code may not.
//
// A rule may also be about a few files of a package rather than the
// package: the CLI's planner (plan*.go) must not reach a stage package,
// although the CLI as a whole serves every stage.
package main
