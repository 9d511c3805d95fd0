// Package reshard provides the checkpoint integrate/reshard engine: it turns
// N per-rank MindSpore .ckpt files into M per-rank files (or one whole file,
// Merge) for any placement of each tensor's slices, streaming the data by
// box intersection in bounded memory and proving with content hashes that
// nothing was lost.
//
// # Overview
//
// A Source is the N files of a training job, in rank order, and where each
// tensor lives: a Placement gives the whole tensor's shape and, for every
// rank, the box (offset and shape, a parallel.Box) its file holds. A Target
// is M ranks with their placements. Plan checks everything and says what a
// run would do; Run does it:
//
//	src := reshard.Source{Files: files, Placements: map[string]reshard.Placement{
//		"fc.weight": {Shape: []int{8, 8}, Boxes: boxesOfFourRanks},
//	}}
//	m, err := reshard.Run(ctx, src, reshard.TargetForDevices(src, 2), "out", reshard.Options{MaxMemory: 64 << 20})
//
// Run writes one file per target rank (Target.Files, default rank_{r}.ckpt)
// and then ManifestName, last. Verify re-reads such a set and checks it
// against its manifest.
//
// # Placements
//
// A tensor without a placement, or with nil Boxes, is replicated: every
// rank holds it whole. That covers scalars (learning_rate, momentum,
// global_step) and data-parallel parameters. Replicated tensors may differ
// between ranks (data-parallel BatchNorm moving statistics are per device),
// so Options.ReplicatedRule chooses the value: RuleRank0 takes rank 0's, as
// MindSpore users do, and RuleMean the element-wise mean over all ranks
// (float tensors only; summed in float64 in rank order, so equal copies give
// exactly their value back).
//
// Optimizer state follows its parameter: a tensor named moments.X (also
// adam_m.X, adam_v.X, accum.X) without a placement of its own uses X's.
//
// Boxes must tile the tensor: every box inside it, boxes that overlap must
// be identical (ranks that repeat a slice), and together they cover every
// element. Splits may be uneven. The source's boxes must match the shapes
// in its files. Where several ranks hold the same source box, the lowest
// rank is read.
//
// # Target rule
//
// TargetForDevices gives the target for "reshard to M devices" without a
// target strategy, by one rule: a tensor the source splits is split along
// its first split dimension into M equal slices, one per target rank, when
// that dimension is divisible by M (the layout dev_matrix [M] with that
// dimension mapped to it); otherwise, and for every replicated tensor, each
// target rank holds it whole. Optimizer state follows its parameter as above.
// DevicesTarget applies the same rule but does not copy an indivisible
// split tensor to every rank without being told: it refuses (naming the
// device counts that divide), splits it unevenly as numpy.array_split does
// (IndivisibleSplit; ranks past the rows get empty boxes) or replicates it
// (IndivisibleReplicate). SizeSummary puts the bytes written beside the
// bytes of the source files.
//
// # Streaming and memory
//
// Each source file is indexed (ckpt.IndexReader) without reading tensor
// data. Each tensor is then processed in bands of whole rows along
// dimension 0: a band is assembled from exactly the source byte ranges that
// intersect it (one ReadAt per source box and band, in parallel), then
// hashed and each target rank's part of it appended to that rank's file
// while the next band is read. Output files are written in the source's
// tensor order, framed byte for byte as ckpt.Write frames them: by default
// plain protobuf as MindSpore's save_checkpoint writes, with
// Options.CRC the crc_num trailer of WriteOptions{CRC: true}.
//
// Options.MaxMemory caps the tensor data the engine holds: the output
// files' write buffers plus one arena, allocated once per run, for two
// bands and a scatter buffer (and a fixed 1 MiB for the mean rule). Bands
// are at most a few MiB whatever the cap: small enough to stay in the CPU
// caches from read to hash to write, and to page in quickly. A plan
// that cannot run under it (one row of a tensor needs more than what is
// left) is refused with ErrMemory. The process needs a few MiB more for the
// Go runtime and the indexes.
//
// # Proof
//
// A tensor's content hash is ckpt.Tensor.Hash of the whole tensor: SHA-256
// of its dtype, dims and row-major bytes, whatever the layout. Run computes
// it from the source while streaming and writes the files from those same
// bands, so each byte is hashed once. Each file gets a CRC-32 computed
// while writing (in the manifest, and its crc_num trailer with
// Options.CRC); after the
// files are written (temp file, fsync, rename) Run re-reads them and checks
// sizes, framing and CRCs, which proves the files hold the hashed bytes,
// and writes the manifest only when everything matched. With
// Options.VerifyOutput = VerifyOutputSHA256 it re-reads them as Verify
// does instead (identical replicas, hashes of the reassembled tensors). Bad input is found before anything is written and
// leaves the output directory as it was; once writing starts, an earlier
// manifest there is removed first, and on any error the files written are
// removed, so nothing partial looks complete. Source files are only read,
// and an output path that is a source file is refused.
package reshard
