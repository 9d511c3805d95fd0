// Package prepare provides the cifar/prepare built-in stage: it writes a
// CIFAR-10 data set in the binary format the seeds use
// (cifar-10-batches-bin/), either generated (source: synthetic, the
// embedded default, since the real data set cannot be downloaded here) or
// checked and copied from a real cifar-10-batches-bin directory, plus one
// shard file per device and a manifest.json with counts and SHA-256 of every
// file.
package prepare

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/mspipe/mspipe/internal/userfile"
	"github.com/mspipe/mspipe/npu/data"
	"github.com/mspipe/mspipe/plugins"
	"github.com/mspipe/mspipe/plugins/sdk"
)

// Name is the stage's `uses` name.
const Name = "cifar/prepare"

// version is part of every cache key: bump it when the output changes.
const version = "1.1.0"

// With is the stage's `with` block.
type With struct {
	Source      string `json:"source,omitempty" jsonschema:"default=synthetic,minLength=1" description:"\"synthetic\" for the built-in generator, or the absolute path of a cifar-10-batches-bin directory"`
	Shards      int    `json:"shards,omitempty" jsonschema:"default=1,minimum=1,maximum=4096" description:"number of shards (num_shards), usually the number of devices"`
	Seed        int    `json:"seed,omitempty" jsonschema:"default=1,minimum=0" description:"seed of the synthetic generator"`
	TrainImages int    `json:"train_images,omitempty" jsonschema:"minimum=10,maximum=250000" description:"synthetic training images, exactly this many, in 5 data_batch files (the first ones one image larger when the count does not divide by 5; default 10000)"`
	TestImages  int    `json:"test_images,omitempty" jsonschema:"minimum=10,maximum=50000" description:"synthetic test images (default 2000)"`
}

// Info registers the stage as a built-in.
func Info() plugins.Info { return plugins.Info{Name: Name, New: New} }

// New returns the stage.
func New() plugins.Stage {
	return sdk.Stage[With]{
		Name:        Name,
		Version:     version,
		Description: "Prepare a CIFAR-10 data set (synthetic or a real cifar-10-batches-bin) with one shard per device and a manifest",
		Outputs: []plugins.OutputSpec{
			{Name: "dir", Type: plugins.TypePath, Description: "the cifar-10-batches-bin directory"},
			{Name: "root", Type: plugins.TypePath, Description: "the data set root: cifar-10-batches-bin/, shards/, manifest.json"},
			{Name: "manifest", Type: plugins.TypePath, Description: "manifest.json with counts and SHA-256 of every file"},
			{Name: "train_count", Type: plugins.TypeInt, Description: "training images"},
			{Name: "test_count", Type: plugins.TypeInt, Description: "test images"},
			{Name: "shards", Type: plugins.TypeInt, Description: "number of shards written"},
		},
		Check:   check,
		Execute: execute,
	}
}

func check(w With) []plugins.Problem {
	if w.Source != "" && w.Source != data.SourceSynthetic && !filepath.IsAbs(w.Source) {
		// "synthetic" is a keyword here, not a path: a relative path would be ambiguous.
		return []plugins.Problem{{Path: "/source", Message: fmt.Sprintf("%q is a relative path: give the absolute path of a cifar-10-batches-bin directory (or \"synthetic\")", w.Source)}}
	}
	if w.Source != data.SourceSynthetic && (w.TrainImages != 0 || w.TestImages != 0) {
		return []plugins.Problem{{Path: "/train_images", Message: "train_images and test_images apply to source: synthetic only"}}
	}
	return nil
}

func execute(ctx context.Context, sc sdk.Context, w With) (map[string]any, error) {
	// A link planted in the work dir would take the data set's files out.
	root, err := userfile.WritableWithin(sc.WorkDir(), "data")
	if err != nil {
		return nil, fmt.Errorf("work dir: %w", err)
	}
	opts := data.PrepareOptions{Source: w.Source, NumShards: w.Shards, Synth: data.DefaultSynthConfig()}
	opts.Synth.Seed = uint64(w.Seed)
	if w.TrainImages > 0 {
		// Exactly the count asked for: the five data_batch files as in the
		// real set, the first ones one image larger when it does not divide.
		opts.Synth = opts.Synth.SynthTrain(w.TrainImages)
	}
	if w.TestImages > 0 {
		opts.Synth.TestRecords = w.TestImages
	}
	sc.Info("preparing CIFAR-10", "source", w.Source, "shards", w.Shards)
	m, err := data.Prepare(ctx, root, opts)
	if err != nil {
		return nil, err
	}
	sc.Info(fmt.Sprintf("wrote %d training and %d test images in %d shards to %s", m.Train.Records, m.Test.Records, w.Shards, root))
	if err := sc.Artifact("manifest", filepath.Join(root, data.ManifestName)); err != nil {
		return nil, err
	}
	return map[string]any{
		"dir":         filepath.Join(root, m.DataDir),
		"root":        root,
		"manifest":    filepath.Join(root, data.ManifestName),
		"train_count": m.Train.Records,
		"test_count":  m.Test.Records,
		"shards":      w.Shards,
	}, nil
}
