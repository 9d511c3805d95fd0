package exec

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/mspipe/mspipe/plugins"
	"github.com/mspipe/mspipe/plugins/sdk"
)

// With is the `with` block of the exec stage.
type With struct {
	Command Command           `json:"command"`
	Shell   *bool             `json:"shell,omitempty" description:"run the command with /bin/sh -c; default true for a string command, false for a list (a list run by the shell is joined with spaces)"`
	Env     map[string]string `json:"env,omitempty" description:"environment variables added for the command"`
	Dir     string            `json:"dir,omitempty" description:"working directory of the command, relative to the stage's work directory"`
	Timeout sdk.Duration      `json:"timeout,omitempty" description:"stop the command and fail the stage after this long (e.g. \"10m\"); 0 means no limit"`
}

// Command is a command line: a string, or a list of arguments.
type Command struct {
	Line string   // set for the string form
	Argv []string // set for the list form
}

// JSONSchema accepts a non-empty string or a non-empty list of strings.
func (Command) JSONSchema() map[string]any {
	return map[string]any{
		"description": "the command: a list of arguments run directly, or a string run by /bin/sh -c",
		"oneOf": []any{
			map[string]any{"type": "string", "minLength": 1},
			map[string]any{"type": "array", "items": map[string]any{"type": "string"}, "minItems": 1},
		},
	}
}

// UnmarshalJSON reads either form.
func (c *Command) UnmarshalJSON(data []byte) error {
	*c = Command{}
	if err := json.Unmarshal(data, &c.Line); err == nil {
		return nil
	}
	if err := json.Unmarshal(data, &c.Argv); err != nil {
		return fmt.Errorf("command: want a string or a list of strings, got %s", data)
	}
	return nil
}

// MarshalJSON writes the form it was read in.
func (c Command) MarshalJSON() ([]byte, error) {
	if c.Argv != nil {
		return json.Marshal(c.Argv)
	}
	return json.Marshal(c.Line)
}

// useShell says whether the command runs through /bin/sh.
func (w With) useShell() bool {
	if w.Shell != nil {
		return *w.Shell
	}
	return w.Command.Argv == nil
}

// argv returns the arguments to execute.
func (w With) argv() []string {
	switch {
	case w.useShell() && w.Command.Argv != nil:
		return []string{"/bin/sh", "-c", strings.Join(w.Command.Argv, " ")}
	case w.useShell():
		return []string{"/bin/sh", "-c", w.Command.Line}
	case w.Command.Argv != nil:
		return w.Command.Argv
	}
	return strings.Fields(w.Command.Line)
}

// check reports what the schema cannot: blank commands and bad variable
// names. It does not rely on the schema having been checked (mspipe does
// that before the stage runs), so an empty list is caught here too.
func check(w With) []plugins.Problem {
	var problems []plugins.Problem
	switch {
	case w.Command.Argv == nil && strings.TrimSpace(w.Command.Line) == "", w.Command.Argv != nil && len(w.Command.Argv) == 0:
		problems = append(problems, plugins.Problem{Path: "/command", Message: "empty command"})
	case w.Command.Argv != nil && strings.TrimSpace(w.Command.Argv[0]) == "":
		problems = append(problems, plugins.Problem{Path: "/command/0", Message: "empty program name"})
	}
	for name := range w.Env {
		if name == "" || strings.ContainsAny(name, "=\x00") {
			problems = append(problems, plugins.Problem{Path: "/env/" + pointerEscape(name), Message: fmt.Sprintf("invalid environment variable name %q", name)})
		}
	}
	if w.Timeout < 0 {
		problems = append(problems, plugins.Problem{Path: "/timeout", Message: "negative timeout"})
	}
	return problems
}

// pointerEscape escapes a JSON pointer token (RFC 6901).
func pointerEscape(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}
