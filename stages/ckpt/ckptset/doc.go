// Package ckptset finds and lays out checkpoint sets: one checkpoint file
// per rank, in device{i}/ckpt_{i}/ under one directory, the way the seeds'
// run.sh and npu/train write them and npu/train's init: reads them back.
//
// Find lists the newest checkpoint of every rank of a set, refusing a set
// with a missing or duplicated rank; RankDir and FilePath say where rank i's
// file goes when a tool writes a set.
package ckptset
