package diag

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// maxSuggestLen bounds the names Suggest compares, in runes: the distance
// costs their product, and a name this long is no typo of a key.
const maxSuggestLen = 64

// Suggest returns ` (did you mean "x"?)`, to end a message about an unknown
// name, for the candidate closest to name, or "" when none is close enough
// to be a plausible typo. Closeness is the edit distance ignoring case; a
// candidate is offered when it is fewer than len(name)/2+2 edits away (so
// short names get one edit, longer ones more), the first of equally close
// candidates winning. Names longer than 64 runes get no suggestion.
func Suggest(name string, candidates []string) string {
	n := utf8.RuneCountInString(name)
	if n > maxSuggestLen {
		return ""
	}
	lower := strings.ToLower(name)
	best, bestDist := "", n/2+2
	for _, c := range candidates {
		if utf8.RuneCountInString(c) > maxSuggestLen {
			continue
		}
		if d := editDistance(lower, strings.ToLower(c)); d < bestDist {
			best, bestDist = c, d
		}
	}
	if best == "" {
		return ""
	}
	return fmt.Sprintf(" (did you mean %q?)", best)
}

// editDistance is the Levenshtein distance between a and b, in runes.
func editDistance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	prev := make([]int, len(rb)+1)
	cur := make([]int, len(rb)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(ra); i++ {
		cur[0] = i
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(rb)]
}
