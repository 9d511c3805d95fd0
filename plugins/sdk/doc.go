// Package sdk provides what a stage plugin author needs: [Serve] to run a
// stage as an mspipe plugin, and [Stage], a typed stage whose `with` block
// is a Go struct, whose JSON Schema is derived from that struct and whose
// events are sent through a [Context].
//
// A complete plugin:
//
//	type With struct {
//		Text  string `json:"text" jsonschema:"description=what to write"`
//		Times int    `json:"times,omitempty" jsonschema:"minimum=1,default=1"`
//	}
//
//	func main() {
//		sdk.Serve(sdk.Stage[With]{
//			Name:    "acme/echo",
//			Version: "1.0.0",
//			Outputs: []plugins.OutputSpec{{Name: "file", Type: plugins.TypePath}},
//			Execute: func(ctx context.Context, sc sdk.Context, w With) (map[string]any, error) {
//				path := filepath.Join(sc.WorkDir(), "echo.txt")
//				text := strings.Repeat(w.Text+"\n", w.Times)
//				if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
//					return nil, err
//				}
//				sc.Info("wrote", "bytes", len(text))
//				return map[string]any{"file": path}, sc.Artifact("echo", path)
//			},
//		})
//	}
//
// Build it as mspipe-stage-acme-echo, put it in ./plugins (or a directory of
// $MSPIPE_PLUGIN_PATH) and use it with `uses: acme/echo`.
//
// # Schema tags
//
// A field is required unless its json tag has omitempty (or omitzero) or it
// has a default. The `jsonschema` tag adds keywords, comma-separated
// (escape a comma in a value as `\,`, or put a description in its own
// `description:"..."` tag): description, title, pattern, format, minimum,
// maximum, exclusiveMinimum, exclusiveMaximum, multipleOf, minLength,
// maxLength, minItems, maxItems, minProperties, maxProperties, enum (values
// separated by "|"), default, deprecated. On a slice field, value keywords
// (minimum, pattern, enum, ...) apply to its items. A type with a
// `JSONSchema() map[string]any` method supplies its own schema, as
// [Duration] does. Instead of `default` tags, a stage may give one value of
// W as [Stage].Defaults: each of its non-zero fields is that property's
// default (see [SchemaWithDefaults]).
//
// # Who checks a block
//
// mspipe checks every `with` block against the schema the stage describes:
// before a pipeline runs, when a `${{ }}` value is known only by its type,
// and again with the resolved values just before the stage's plugin starts.
// A block that does not fit never reaches the plugin. The SDK does not
// check the schema again (it links no JSON Schema library, whose
// initialisation would slow every plugin start): Validate and Run fill in
// defaults, decode the block strictly into W (unknown fields and values of
// the wrong type are problems) and call Check, which is the place for what
// a schema cannot express. Check must not assume that the schema holds:
// Validate may be called with any block.
//
// # Checks that need the cluster
//
// Some problems depend on where the stage runs: a shard strategy whose
// splits do not divide the device count, a per-device batch larger than
// the data. [Stage].CheckCluster gets the cluster with the decoded block.
// `mspipe validate` (and `mspipe run`, before anything starts) calls it
// through Validate with what is known before the run: the stage's devices
// and rank table (Devices is 0 when the count comes from something only
// the run knows), and unknown, the top-level keys whose `${{ }}` values
// need other stages' outputs or run data. Those keys are absent from the
// block, so their fields hold defaults: skip what depends on them. Run
// calls it again with the run's cluster and every value known; a problem
// then fails the stage before Execute. mspipe reports each problem at the
// place its Path points to in the spec (file:line:col).
//
//	sdk.Stage[With]{
//		// ...
//		CheckCluster: func(w With, c plugins.Cluster, unknown []string) []plugins.Problem {
//			if c.Devices == 0 || slices.Contains(unknown, "parts") {
//				return nil // checked when the stage runs
//			}
//			if c.Devices%w.Parts != 0 {
//				return []plugins.Problem{{Path: "/parts",
//					Message: fmt.Sprintf("%d parts do not divide %d devices", w.Parts, c.Devices)}}
//			}
//			return nil
//		},
//	}
//
// Validate drops a problem of Check or CheckCluster whose Path is at or
// below an unknown key, since the value checked there was a stand-in.
package sdk
