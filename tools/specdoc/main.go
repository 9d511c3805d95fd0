package main

import (
	"context"
	"flag"
	"fmt"
	"os"

	"github.com/mspipe/mspipe/internal/atomicfile"
	"github.com/mspipe/mspipe/schemas"
	"github.com/mspipe/mspipe/stages/builtin"
)

// DefaultOutput is where the reference lives, relative to the module root.
const DefaultOutput = "docs/spec-reference.md"

func main() {
	out := flag.String("o", DefaultOutput, "file to write, or - for stdout")
	flag.Parse()
	if err := run(*out); err != nil {
		fmt.Fprintln(os.Stderr, "specdoc:", err)
		os.Exit(1)
	}
}

func run(out string) error {
	doc, err := generate(context.Background())
	if err != nil {
		return err
	}
	if out == "-" {
		_, err := os.Stdout.Write(doc)
		return err
	}
	if err := atomicfile.WriteFile(out, doc, 0o644); err != nil {
		return fmt.Errorf("write %s: %w", out, err)
	}
	return nil
}

// generate renders the reference from the embedded pipeline schema, the
// built-in stages this build registers and the notes about them.
func generate(ctx context.Context) ([]byte, error) {
	stages, err := builtin.Descriptors(ctx)
	if err != nil {
		return nil, err
	}
	notes, err := parseStageNotes(stageNotesFile)
	if err != nil {
		return nil, err
	}
	return Render(schemas.Base, stages, notes)
}
