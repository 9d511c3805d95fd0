// Package ckptset finds, reads and lays out checkpoint sets: one checkpoint
// file per rank, in device{i}/ckpt_{i}/ under one directory, the way the
// seeds' run.sh and npu/train write them and npu/train's init: reads them
// back. It is what the ckpt/integrate and ckpt/reshard stages and the
// mspipe ckpt commands share on top of npu/reshard.
//
// Find lists the newest checkpoint of every rank of a set, refusing a set
// with a missing rank; Files does the same for command-line arguments (a
// directory or rank files). Load opens a set for the engine: the layout of
// its tensors comes from a strategy file (given, or strategy.ckpt /
// strategy.json beside the ranks, as npu/train saves it), from the manifest
// of an earlier reshard, or, with neither, every tensor is replicated (a
// data-parallel set). Set.Target and Set.StrategyForDevices give the target
// of a reshard and the strategy file that describes it; Reshard writes
// both, the manifest last. WholeShape recovers a tensor's shape from one
// rank's slice and its layout.
package ckptset
