// Package diag provides the positioned diagnostics mspipe reports for the
// files users write: pipeline specs, rank tables and, later, strategy files.
//
// A Diagnostic names a place (file, line, column), a severity, an optional
// code and a message, and prints the way compilers do:
//
//	two-stage-training.yaml:14:20: error: cluster.devices: HCCL supports 1, 2, 4 or 8 devices on one host, not 3
//
// Checkers collect every problem into a List; List.Err is nil while the list
// holds only warnings. A Reporter prints the results of checking many files
// in one of three formats: text for people, github for GitHub Actions
// annotations, json for programs.
//
// Locator turns byte offsets into lines and columns, and JSONSyntaxError
// names the first place where a JSON text stops being valid, for checkers
// that read JSON with encoding/json. Suggest ends a message about an
// unknown name with the one rule every checker uses for "did you mean".
package diag
