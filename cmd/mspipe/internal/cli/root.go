package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/rs/zerolog"
	"github.com/spf13/cobra"
)

// Exit codes shared by every subcommand.
const (
	ExitOK          = 0   // success
	ExitFailed      = 1   // invalid spec, invalid rank table, failed pipeline
	ExitUsage       = 2   // bad flags or arguments, unreadable files
	ExitInterrupted = 130 // SIGINT or SIGTERM
)

// exitError carries the exit code a command wants, next to its error. A nil
// Err means the command already printed what the user needs to see.
type exitError struct {
	Code int
	Err  error
}

func (e *exitError) Error() string {
	if e.Err == nil {
		return fmt.Sprintf("exit status %d", e.Code)
	}
	return e.Err.Error()
}

func (e *exitError) Unwrap() error { return e.Err }

// failed reports a failure (exit 1) that the command has already printed.
func failed() error { return &exitError{Code: ExitFailed} }

// usageErr marks err as a usage or I/O problem (exit 2).
func usageErr(err error) error { return &exitError{Code: ExitUsage, Err: err} }

// Main runs the mspipe CLI with args (without the program name) and returns
// the process exit code. Results go to stdout, diagnostics to stderr.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	root := newRootCmd(stdout, stderr)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	code := exitCode(ctx, err)
	if err != nil {
		var ee *exitError
		if !errors.As(err, &ee) || ee.Err != nil {
			fmt.Fprintf(stderr, "mspipe: %v\n", err)
		}
	}
	return code
}

func exitCode(ctx context.Context, err error) int {
	if err == nil {
		return ExitOK
	}
	if ctx.Err() != nil || errors.Is(err, context.Canceled) {
		return ExitInterrupted
	}
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.Code
	}
	// Errors raised by cobra itself (unknown flag, wrong arg count) are usage errors.
	return ExitUsage
}

func newRootCmd(stdout, stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:   "mspipe",
		Short: "Declarative pipelines for distributed training on (simulated) Ascend devices",
		Long: `mspipe runs the whole life of a distributed training job from one YAML file:
prepare sharded CIFAR-10 data, train on N devices in a parallel mode, integrate
the per-rank checkpoint slices, reshard them for a new cluster size, retrain.

Every stage runs in a plugin process apart from mspipe; devices are simulated on the CPU,
one process per device, with real collectives between them.`,
		Example: `  mspipe run examples/standalone.yaml    # train on one simulated device
  mspipe run examples/data-parallel.yaml # 8 devices, one process each
  mspipe validate examples/              # check every pipeline in a directory
  mspipe resume                          # continue the latest failed run
  mspipe schema > pipeline.schema.json   # the JSON Schema for editors and CI
  mspipe ranktable generate --devices 8  # an HCCL rank table for one 8-device host`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.PersistentFlags().String("log-format", "text", "how run and resume report events on stderr: text (lines for people, with a live view on a terminal) or json (one JSON object per event)")
	root.PersistentPreRunE = func(cmd *cobra.Command, _ []string) error {
		if f, _ := cmd.Flags().GetString("log-format"); f != "text" && f != "json" {
			return usageErr(fmt.Errorf("--log-format %q: want text or json", f))
		}
		if fl := cmd.Flags().Lookup("output"); fl != nil && fl.Annotations[outputFormatFlag] != nil {
			if f := fl.Value.String(); f != "" && f != "text" && f != "json" {
				return usageErr(fmt.Errorf("--output %q: want text or json", f))
			}
		}
		return nil
	}
	root.AddCommand(
		newRunCmd(),
		newPlanCmd(),
		newGraphCmd(),
		newRunsCmd(),
		newLogsCmd(),
		newReportCmd(),
		newResumeCmd(),
		newPluginsCmd(),
		newValidateCmd(),
		newSchemaCmd(),
		newRanktableCmd(),
		newCkptCmd(),
		newVersionCmd(),
		newPluginServeCmd(),
		newWorkerCmd(),
	)
	return root
}

// outputFormatFlag marks the --output flag of the commands that run
// stages (run, resume), where it names the event format; other commands'
// --output names a file.
const outputFormatFlag = "mspipe/output-format"

// logFormat returns the --output (or --log-format) of cmd: text when it has
// no such flag.
func logFormat(cmd *cobra.Command) string {
	if fl := cmd.Flags().Lookup("output"); fl != nil && fl.Annotations[outputFormatFlag] != nil && fl.Value.String() != "" {
		return fl.Value.String()
	}
	if f, err := cmd.Flags().GetString("log-format"); err == nil && f != "" {
		return f
	}
	return "text"
}

// newLogger returns the logger a command passes down to the engine, writing
// to out in the --log-format: json writes each event as one JSON object
// (debug level: progress and metrics included); text writes the message
// of each event at info level and above, one line each, as people read it.
func newLogger(cmd *cobra.Command, out io.Writer) zerolog.Logger {
	if logFormat(cmd) == "json" {
		return zerolog.New(zerolog.SyncWriter(out)).Level(zerolog.DebugLevel).With().Timestamp().Logger()
	}
	return zerolog.New(zerolog.SyncWriter(messageLines{out: out})).Level(zerolog.InfoLevel)
}

// messageLines writes only the message of each zerolog event, as a line.
type messageLines struct{ out io.Writer }

func (m messageLines) Write(p []byte) (int, error) {
	var ev struct {
		Message string `json:"message"`
	}
	if err := json.Unmarshal(p, &ev); err != nil {
		return 0, fmt.Errorf("log event: %w", err)
	}
	if _, err := io.WriteString(m.out, ev.Message+"\n"); err != nil {
		return 0, err
	}
	return len(p), nil
}
