package pipeline

import (
	"io/fs"
	"syscall"
)

// fileStatKey returns the digest cache's key of a file from its stat.
func fileStatKey(info fs.FileInfo) (statKey, error) {
	st, ok := info.Sys().(*syscall.Stat_t)
	if !ok {
		return statKey{}, errStatKey
	}
	return statKey{
		Size:    info.Size(),
		MtimeNs: st.Mtim.Nano(),
		CtimeNs: st.Ctim.Nano(),
		Inode:   st.Ino,
		Device:  uint64(st.Dev), //nolint:unconvert // a uint64 on some Linux ports, not on others
	}, nil
}

// fileInode returns a file's inode number, 0 when stat does not say.
func fileInode(info fs.FileInfo) uint64 {
	if st, ok := info.Sys().(*syscall.Stat_t); ok {
		return st.Ino
	}
	return 0
}
