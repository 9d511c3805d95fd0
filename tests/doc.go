// Package tests holds mspipe's end-to-end tests: they build the mspipe
// binary and test plugins, then run pipelines as a user would, in fresh
// directories, and check run directories, exit codes and processes.
//
// testdata/bad is a corpus of bad input (specs, rank tables, run states,
// checkpoints), one directory per case with a case.txt saying what to run
// and what mspipe must answer; see TestBadInputCorpus.
package tests
