// Command mutate is a small mutation-testing runner: it applies single-line
// mutations from a list one at a time, runs the tests of the packages each
// mutation names, restores the file, and prints which mutations the tests
// killed and which survived.
//
//	go run ./tools/mutate                      # every mutation in mutations.txt
//	go run ./tools/mutate -only 'cache|retry'   # names matching a regexp
//	go run ./tools/mutate -list my.txt -timeout 5m
//	go run ./tools/mutate -check                # entries still match the code?
//
// A mutation names the code to change by a snippet, not a line number, so
// the list survives edits around it:
//
//	## cache key ignores env
//	in: pipeline
//	test: ./pipeline
//	- Env       map[string]string `json:"env,omitempty"`
//	+ Env       map[string]string `json:"-"`
//
// "in" is a file or a package directory (its non-test .go files); the "-"
// text must occur in exactly one line there (runs of spaces match any
// spacing) and is replaced by the "+" text in that line. "test" lists the
// packages whose tests judge the mutant; an optional "run" is passed as
// go test -run. A snippet that is missing or not unique is reported as
// stale, so a refactoring shows which entries to update.
//
// Run it from the repository root. The file is restored from memory after
// every mutant, also on Ctrl-C or SIGTERM (the test processes are killed
// first); only a SIGKILL can leave a mutant behind, which git status shows.
// A baseline run first checks that every test set passes unmutated.
//
// Results: killed (the tests failed), survived (they passed), timeout (the
// test run hit -timeout; counted as killed), invalid (the mutant does not
// compile: fix the entry), stale (snippet not found or not unique).
package main
