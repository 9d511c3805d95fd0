// Package report renders runs of a pipeline as a single self-contained
// HTML file. For one run: the configuration of each training stage, the
// results, each training lineage (a stage and the stages that continue
// from its checkpoints) on one global-step axis (loss with ranks that
// reported equal losses drawn once, accuracy after each stage, learning
// rate, images per second), the after-step device memory per rank, the
// stage graph, a timeline, the split tensors of each sharding strategy
// and the tensor manifests of integrate and reshard stages. For several
// runs of one pipeline: their curves on shared axes, stage times and
// results side by side.
//
// The simplest use reads a run directory and writes its report:
//
//	r, err := report.Load(ctx, runsDir, runDir, state)
//	...
//	err = report.Write(w, r, time.Now())
//
// The page holds inline CSS and inline SVG only: no script, no font, no
// image from elsewhere, so it opens offline and can be mailed or archived
// as is (links to other runs' reports are relative). Every string that
// comes from the run (stage ids, outputs, tensor names, error text) is
// HTML-escaped by html/template.
package report
