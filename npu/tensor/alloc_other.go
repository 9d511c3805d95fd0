//go:build !linux

package tensor

// adviseHugePages does nothing here: only Linux takes the advice.
func adviseHugePages([]float32) {}
