package ranktable

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

func FuzzParse(f *testing.F) {
	for _, pattern := range []string{"testdata/valid/*.json", "testdata/invalid/*.json"} {
		files, err := filepath.Glob(pattern)
		if err != nil {
			f.Fatal(err)
		}
		for _, file := range files {
			data, err := os.ReadFile(file)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(data)
		}
	}
	for _, s := range []string{``, `{}`, `[]`, `{"server_list":[{"device":[{}]}]}`, `{"a":"\u00e9"}`, "{\"a\":1e5}", `"x"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		table, problems := Check("fuzz.json", data)
		lines := bytes.Count(data, []byte("\n")) + 1
		for _, p := range problems {
			if p.Line < 1 || p.Line > lines || p.Column < 1 || p.Column > len(data)+1 {
				t.Fatalf("problem with bad position %+v", p)
			}
			if p.Message == "" || p.File != "fuzz.json" {
				t.Fatalf("problem without message or file: %+v", p)
			}
		}
		if table == nil || problems.HasErrors() {
			return
		}
		// A valid table survives Encode and Check unchanged and lists its ranks.
		again, problems2 := Check("again.json", table.Encode())
		if problems2.HasErrors() {
			t.Fatalf("re-encoded table invalid: %v\n%s", problems2.Err(), table.Encode())
		}
		if again.Version != table.Version || again.ServerCount != table.ServerCount || again.Status != table.Status ||
			!reflect.DeepEqual(again.ServerList, table.ServerList) {
			t.Fatalf("round trip changed the table:\n%s", table.Encode())
		}
		ranks, err := table.Ranks()
		if err != nil || len(ranks) != table.RankSize() {
			t.Fatalf("Ranks() on a valid table: %d ranks, %v", len(ranks), err)
		}
		for i, r := range ranks {
			if r.RankID != i {
				t.Fatalf("rank %d has id %d", i, r.RankID)
			}
		}
	})
}
