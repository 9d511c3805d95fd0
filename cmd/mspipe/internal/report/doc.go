// Package report renders one run of a pipeline as a single self-contained
// HTML file: the stage graph with each stage's state, a timeline, loss
// curves per stage and rank, per-rank peak device memory, the sharding
// strategy of each training stage and the tensor manifests of integrate
// and reshard stages.
//
// The simplest use reads a run directory and writes its report:
//
//	r, err := report.Load(ctx, runsDir, runDir, state)
//	...
//	err = report.Write(w, r)
//
// The page holds inline CSS and inline SVG only: no script, no font, no
// image from elsewhere, so it opens offline and can be mailed or archived
// as is. Every string that comes from the run (stage ids, outputs, tensor
// names, error text) is HTML-escaped by html/template.
package report
