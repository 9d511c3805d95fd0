package data

import "fmt"

// Sharding follows MindSpore's DistributedSampler, which Cifar10Dataset uses
// when num_shards/shard_id are given (with shuffle left unset it is created
// with shuffle=True). The rule, as implemented in MindSpore's
// minddata/dataset/engine/datasetops/source/sampler/distributed_sampler.cc
// (InitSampler, GetNextSample; default even_dist=true, offset=-1) and
// python/mindspore/dataset/engine/datasets.py (_select_sampler):
//
//   - every shard reads the same number of samples, ceil(n / num_shards);
//   - the c-th sample of shard k is position (num_shards*c + k) mod n, so the
//     shards interleave and an uneven count is padded by wrapping around to
//     the start (nothing is dropped; a few samples are read twice per epoch);
//   - with shuffle, position p maps to perm[p], where perm is one permutation
//     of all n indices drawn from a seed every shard shares, so the shards
//     stay disjoint apart from the padding; a new permutation is drawn each
//     epoch.
//
// MindSpore draws perm with std::shuffle over mt19937 and reseeds with
// seed+1 each epoch, shuffling the previous permutation again. mspipe draws
// each epoch's permutation afresh from (seed, epoch) with its own SplitMix64
// Fisher–Yates shuffle, so epoch k can be reproduced without replaying
// epochs 0..k-1 (resume). The assignment rule is MindSpore's; the particular
// permutations are mspipe's own.

// ShardSize returns how many samples each of numShards shards reads from a
// data set of n samples: ceil(n/numShards).
func ShardSize(n, numShards int) int {
	return (n + numShards - 1) / numShards
}

// checkShard validates a shard configuration against a data set size.
func checkShard(n, numShards, shardID int) error {
	switch {
	case n <= 0:
		return fmt.Errorf("%w: data set has %d samples, need at least 1", ErrConfig, n)
	case numShards < 1:
		return fmt.Errorf("%w: num_shards %d must be at least 1", ErrConfig, numShards)
	case shardID < 0 || shardID >= numShards:
		return fmt.Errorf("%w: shard_id %d must be in [0, %d]", ErrConfig, shardID, numShards-1)
	}
	return nil
}

// ShardIndices appends to dst the data set indices that shard shardID of
// numShards reads in one epoch, in read order, for a data set of n samples.
// perm is the epoch's permutation of 0..n-1 (see Permutation), or nil for a
// sequential (unshuffled) sampler. It reuses dst's storage.
func ShardIndices(dst []int, n, numShards, shardID int, perm []int) ([]int, error) {
	if err := checkShard(n, numShards, shardID); err != nil {
		return dst, err
	}
	if perm != nil && len(perm) != n {
		return dst, fmt.Errorf("%w: permutation has %d entries for %d samples", ErrConfig, len(perm), n)
	}
	dst = dst[:0]
	for c := range ShardSize(n, numShards) {
		pos := (numShards*c + shardID) % n
		if perm != nil {
			pos = perm[pos]
		}
		dst = append(dst, pos)
	}
	return dst, nil
}

// Permutation writes into dst (resized to n) a seeded uniform permutation of
// 0..n-1 (Fisher–Yates with SplitMix64). The same seed gives the same
// permutation everywhere.
func Permutation(dst []int, n int, seed uint64) []int {
	dst = resizeInts(dst, n)
	for i := range dst {
		dst[i] = i
	}
	r := newRNG(seed)
	for i := n - 1; i > 0; i-- {
		j := r.intn(i + 1)
		dst[i], dst[j] = dst[j], dst[i]
	}
	return dst
}

// EpochPermutation is the sampler permutation of an epoch: Permutation
// seeded from the base seed and the epoch number.
func EpochPermutation(dst []int, n int, seed uint64, epoch int) []int {
	return Permutation(dst, n, deriveSeed(seed, tagSampler, uint64(epoch), 0))
}

func resizeInts(s []int, n int) []int {
	if cap(s) < n {
		return make([]int, n)
	}
	return s[:n]
}
