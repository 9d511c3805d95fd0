//go:build !linux

package pipeline

import "io/fs"

// fileStatKey has no key outside Linux (the stat fields differ by
// system): there every file is hashed in full each time.
func fileStatKey(fs.FileInfo) (statKey, error) {
	return statKey{}, errStatKey
}

// fileInode is 0 outside Linux: callers then treat the file as changed.
func fileInode(fs.FileInfo) uint64 { return 0 }
