// Package tests holds mspipe's end-to-end tests: they build the mspipe
// binary and test plugins, then run pipelines as a user would, in fresh
// directories, and check run directories, exit codes and processes.
package tests
