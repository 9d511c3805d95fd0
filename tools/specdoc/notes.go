package main

import (
	_ "embed"
	"fmt"
	"strings"
)

// stageNotesFile is the hand-written prose about each built-in stage that
// the reference prints under the stage's generated tables.
//
//go:embed stagenotes.md
var stageNotesFile string

// StageNotes maps a stage name to the markdown written about it.
type StageNotes map[string]string

// parseStageNotes splits a notes file into its "## `name`" sections; the
// text before the first section (a comment for editors) is dropped.
func parseStageNotes(text string) (StageNotes, error) {
	notes := StageNotes{}
	var name string
	var body []string
	flush := func() error {
		if name == "" {
			return nil
		}
		if _, dup := notes[name]; dup {
			return fmt.Errorf("stage notes: %q has two sections", name)
		}
		notes[name] = strings.TrimSpace(strings.Join(body, "\n"))
		return nil
	}
	for i, line := range strings.Split(text, "\n") {
		if !strings.HasPrefix(line, "## ") {
			body = append(body, line)
			continue
		}
		if err := flush(); err != nil {
			return nil, err
		}
		heading := strings.TrimSpace(strings.TrimPrefix(line, "## "))
		if len(heading) < 3 || heading[0] != '`' || heading[len(heading)-1] != '`' {
			return nil, fmt.Errorf("stage notes line %d: heading %q is not a stage name in backquotes", i+1, heading)
		}
		name, body = strings.Trim(heading, "`"), nil
	}
	if err := flush(); err != nil {
		return nil, err
	}
	return notes, nil
}
