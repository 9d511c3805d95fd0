package data

import (
	"errors"
	"slices"
	"testing"
)

func TestShardIndicesSequential(t *testing.T) {
	cases := []struct {
		n, shards, id int
		want          []int
	}{
		{10, 1, 0, []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}},
		{10, 2, 0, []int{0, 2, 4, 6, 8}},
		{10, 2, 1, []int{1, 3, 5, 7, 9}},
		// Uneven: ceil(10/4) = 3 each; positions 10 and 11 wrap to 0 and 1.
		{10, 4, 0, []int{0, 4, 8}},
		{10, 4, 1, []int{1, 5, 9}},
		{10, 4, 2, []int{2, 6, 0}},
		{10, 4, 3, []int{3, 7, 1}},
		// More shards than samples: every shard still reads one sample.
		{3, 8, 0, []int{0}},
		{3, 8, 2, []int{2}},
		{3, 8, 5, []int{2}},
		{3, 8, 7, []int{1}},
		// 7 samples on 3 shards: positions 2, 5, 8→1.
		{7, 3, 2, []int{2, 5, 1}},
	}
	for _, tc := range cases {
		got, err := ShardIndices(nil, tc.n, tc.shards, tc.id, nil)
		if err != nil {
			t.Fatalf("n=%d shards=%d id=%d: %v", tc.n, tc.shards, tc.id, err)
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("n=%d shards=%d id=%d: got %v, want %v", tc.n, tc.shards, tc.id, got, tc.want)
		}
	}
}

func TestShardIndicesShuffled(t *testing.T) {
	// With a permutation, position p reads perm[p]; all shards share it.
	perm := []int{7, 2, 9, 0, 5, 1, 8, 3, 6, 4}
	cases := []struct {
		shards, id int
		want       []int
	}{
		{3, 0, []int{7, 0, 8, 4}}, // positions 0, 3, 6, 9
		{3, 1, []int{2, 5, 3, 7}}, // positions 1, 4, 7, 10→0
		{3, 2, []int{9, 1, 6, 2}}, // positions 2, 5, 8, 11→1
	}
	for _, tc := range cases {
		got, err := ShardIndices(nil, len(perm), tc.shards, tc.id, perm)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("shards=%d id=%d: got %v, want %v", tc.shards, tc.id, got, tc.want)
		}
	}
}

func TestShardSizeAndCoverage(t *testing.T) {
	cases := []struct{ n, shards, size, padded int }{
		{50000, 8, 6250, 0},
		{50000, 3, 16667, 1},
		{60000, 16, 3750, 0},
		{10, 4, 3, 2},
		{1, 4, 1, 3},
		{10000, 7, 1429, 3},
	}
	for _, tc := range cases {
		if got := ShardSize(tc.n, tc.shards); got != tc.size {
			t.Errorf("ShardSize(%d, %d) = %d, want %d", tc.n, tc.shards, got, tc.size)
		}
		perm := EpochPermutation(nil, tc.n, 42, 3)
		seen := make([]int, tc.n)
		padded := 0
		for k := range tc.shards {
			idx, err := ShardIndices(nil, tc.n, tc.shards, k, perm)
			if err != nil {
				t.Fatal(err)
			}
			if len(idx) != tc.size {
				t.Fatalf("shard %d has %d samples, want %d", k, len(idx), tc.size)
			}
			for _, i := range idx {
				seen[i]++
			}
			padded += paddedCount(tc.n, tc.shards, k)
		}
		if padded != tc.padded {
			t.Errorf("n=%d shards=%d: %d padded positions, want %d", tc.n, tc.shards, padded, tc.padded)
		}
		// Every sample is read, and only the padding reads one twice.
		twice := 0
		for i, c := range seen {
			if c == 0 {
				t.Fatalf("n=%d shards=%d: sample %d never read", tc.n, tc.shards, i)
			}
			twice += c - 1
		}
		if twice != tc.padded {
			t.Errorf("n=%d shards=%d: %d repeated reads, want %d", tc.n, tc.shards, twice, tc.padded)
		}
	}
}

func TestShardIndicesErrors(t *testing.T) {
	cases := []struct {
		n, shards, id int
		perm          []int
		want          string
	}{
		{0, 1, 0, nil, "invalid data config: data set has 0 samples, need at least 1"},
		{10, 0, 0, nil, "invalid data config: num_shards 0 must be at least 1"},
		{10, 4, 4, nil, "invalid data config: shard_id 4 must be in [0, 3]"},
		{10, 4, -1, nil, "invalid data config: shard_id -1 must be in [0, 3]"},
		{3, 1, 0, []int{0, 1}, "invalid data config: permutation has 2 entries for 3 samples"},
	}
	for _, tc := range cases {
		_, err := ShardIndices(nil, tc.n, tc.shards, tc.id, tc.perm)
		if err == nil || err.Error() != tc.want || !errors.Is(err, ErrConfig) {
			t.Errorf("n=%d shards=%d id=%d: error %v, want %q", tc.n, tc.shards, tc.id, err, tc.want)
		}
	}
}

func TestPermutationIsSeeded(t *testing.T) {
	a := EpochPermutation(nil, 1000, 7, 0)
	b := EpochPermutation(make([]int, 5), 1000, 7, 0)
	if !slices.Equal(a, b) {
		t.Fatal("same seed and epoch gave different permutations")
	}
	sorted := slices.Clone(a)
	slices.Sort(sorted)
	for i, v := range sorted {
		if v != i {
			t.Fatalf("not a permutation: sorted[%d] = %d", i, v)
		}
	}
	if slices.Equal(a, EpochPermutation(nil, 1000, 7, 1)) {
		t.Error("epochs 0 and 1 share a permutation")
	}
	if slices.Equal(a, EpochPermutation(nil, 1000, 8, 0)) {
		t.Error("seeds 7 and 8 share a permutation")
	}
	// Pin the stream: the first entries of a small permutation never change.
	if got, want := Permutation(nil, 10, 1), []int{9, 0, 1, 4, 8, 2, 3, 7, 6, 5}; !slices.Equal(got, want) {
		t.Errorf("Permutation(10, seed 1) = %v, want %v", got, want)
	}
}
