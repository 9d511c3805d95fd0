// Package data provides the CIFAR-10 input layer of the simulated NPU
// training core: a reader of the CIFAR-10 binary format, a deterministic
// synthetic data set in that format, MindSpore's num_shards/shard_id sample
// assignment, the seeds' image transforms, a prefetching batch iterator, and
// the helpers that prepare, shard, hash and verify a data set directory.
//
// The simplest use reads a prepared directory and trains on rank k of n:
//
//	set, err := data.ReadDir(filepath.Join(root, data.DataDirName), data.SplitTrain)
//	p, err := data.NewPipeline(set, data.SeedConfig(n, k, seed))
//	it, err := p.Iterate(ctx, startEpoch, epochs, 2)
//	defer it.Close()
//	for {
//		b, err := it.Next() // io.EOF at the end
//		// b.Images: float32 NCHW, b.Labels: int32
//	}
//
// # Format
//
// A batch file is a sequence of 3073-byte records: one label byte (0..9),
// then 1024 red, 1024 green and 1024 blue bytes, each plane row-major 32×32.
// A cifar-10-batches-bin directory holds data_batch_1.bin .. data_batch_5.bin
// and test_batch.bin; the train split is the data batches in name order, as
// MindSpore's Cifar10Dataset reads them (its "all" usage appends the test
// batch). Reading keeps the records as they are in the file (planar CHW);
// each file is read with one read call into one shared buffer.
//
// # Pipeline
//
// Config mirrors the seeds' create_dataset: DistributedSampler sharding
// with a fresh permutation per epoch (see ShardIndices for the rule and its
// source), RandomCrop(32, padding 4), RandomHorizontalFlip, optional
// bilinear Resize, Rescale(1/255, 0), Normalize with the seeds' mean and
// std, HWC2CHW (the planar layout is kept throughout, so it costs nothing),
// label TypeCast to int32, shuffle(buffer_size) with MindSpore's buffer
// semantics, batch with drop_remainder, and repeat as a range of epochs.
//
// # Invariants
//
//   - Determinism: every random draw derives from (Config.Seed, epoch,
//     sample position) through SplitMix64, never from call order, so a batch
//     is a pure function of (data, config, epoch, step). Resuming at epoch k
//     replays exactly the stream an uninterrupted run would have produced,
//     and the prefetching goroutine cannot change it.
//   - Buffers: a Loader fills caller-owned Batches in place and does not
//     allocate in steady state; an Iterator cycles a fixed pool of
//     prefetch+2 Batches.
//   - Files: every file is written atomically; a prepared root's
//     manifest.json is written last and lists the SHA-256 of every file, and
//     Verify re-hashes them.
package data
