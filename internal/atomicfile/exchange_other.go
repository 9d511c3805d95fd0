//go:build !linux

package atomicfile

// exchange swaps the directories a and b in two renames: renameat2's
// RENAME_EXCHANGE is Linux's.
func exchange(a, b string) error { return exchangeByRenames(a, b) }
