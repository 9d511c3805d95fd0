// Package spec provides the mspipe pipeline specification: its Go types, a
// strict YAML decoder that keeps the line and column of every value, the
// `${{ expr }}` template language (expr-lang, compiled against a typed
// environment), and the semantic checks that run before anything executes.
//
// # Overview
//
// Load or Parse a file, then Validate it against a Catalog of the stages the
// binary knows:
//
//	p, errs, err := spec.Load("pipeline.yaml")
//	if err != nil { ... } // the file cannot be read
//	if spec.Decoded(errs) {
//		errs = append(errs, spec.Validate(p, catalog, spec.Options{})...)
//	}
//	if errs.Err() != nil { ... } // every problem, a diag.List sorted by position
//
// Spec never runs anything: resolving a stage's inputs (Resolver.With) only
// evaluates expressions against values the caller supplies, and
// Resolver.CheckWith checks the resolved inputs against the stage's schema,
// which Validate could apply to a `${{ }}` value by its type only.
//
// # Expressions
//
// A string value may hold `${{ expr }}` templates. A string that is exactly
// one template takes the expression's type (`shards: "${{ cluster.devices }}"`
// is an int); otherwise each template is formatted into the string. The
// environment is typed: params by their declared type, cluster.devices and
// cluster.hosts as int, cluster.rank_table as string, stages.<id>.outputs.<name>
// by the type the stage declares, env.<NAME> as string, and run.id, run.dir,
// run.name as strings. A misspelt name, a stage that is not (transitively) in
// needs, or an `if` that is not boolean is a validation error.
package spec
