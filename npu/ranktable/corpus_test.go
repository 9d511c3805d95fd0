package ranktable

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mspipe/mspipe/internal/testutil/golden"

	"github.com/mspipe/mspipe/internal/diag"
)

// formatProblems renders problems one per line, as the CLI's text format does.
func formatProblems(ps diag.List) string {
	var b strings.Builder
	for _, p := range ps {
		b.WriteString(p.String())
		b.WriteByte('\n')
	}
	return b.String()
}

func TestInvalidCorpus(t *testing.T) {
	files, err := filepath.Glob("testdata/invalid/*.json")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 15 {
		t.Fatalf("invalid corpus has %d files, want at least 15", len(files))
	}
	for _, file := range files {
		name := filepath.Base(file)
		t.Run(strings.TrimSuffix(name, ".json"), func(t *testing.T) {
			data, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			_, problems := Check(name, data)
			if !problems.HasErrors() {
				t.Errorf("%s: no error reported; problems:\n%s", name, formatProblems(problems))
			}
			for _, p := range problems {
				if p.Line < 1 || p.Column < 1 {
					t.Errorf("problem without position: %v", p)
				}
			}
			got := formatProblems(problems)
			golden.Check(t, strings.TrimSuffix(file, ".json")+".golden", []byte(got))
		})
	}
}

func TestValidSeedTables(t *testing.T) {
	placeholder := `warning: placeholder server_id "10.*.*.*": replace with the host's IP before running on a cluster`
	tests := []struct {
		file     string
		rankSize int
		want     []string
	}{
		{"rank_table_8pcs.json", 8, []string{"rank_table_8pcs.json:6:26: " + placeholder}},
		{"rank_table_2pcs.json", 2, []string{"rank_table_2pcs.json:6:26: " + placeholder}},
		{"rank_table_16pcs.json", 16, []string{
			"rank_table_16pcs.json:4:20: warning: rank order against lexicographic server_id order is not checked for placeholder server_ids; validate again once they are the hosts' IPs",
			"rank_table_16pcs.json:6:26: " + placeholder,
			"rank_table_16pcs.json:19:26: " + placeholder,
		}},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			table, problems, err := Load(filepath.Join("testdata", "valid", tt.file))
			if err != nil {
				t.Fatal(err)
			}
			if err := problems.Err(); err != nil {
				t.Fatalf("seed table invalid: %v", err)
			}
			// Load names problems by the path it was given.
			got := strings.ReplaceAll(formatProblems(problems), filepath.Join("testdata", "valid")+string(filepath.Separator), "")
			want := strings.Join(tt.want, "\n") + "\n"
			if got != want {
				t.Errorf("problems:\n%s\nwant:\n%s", got, want)
			}
			if n := table.RankSize(); n != tt.rankSize {
				t.Errorf("RankSize() = %d, want %d", n, tt.rankSize)
			}
		})
	}
}
