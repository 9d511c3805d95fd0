// Package cli provides the mspipe command line: one file per subcommand, each
// a constructor returning its *cobra.Command with a thin RunE over the spec,
// pipeline and npu packages. Exit codes are decided in one place (exitCode).
package cli
