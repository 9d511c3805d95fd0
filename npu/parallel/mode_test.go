package parallel

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

func TestModeNamesRoundTrip(t *testing.T) {
	for _, m := range Modes() {
		text, err := m.MarshalText()
		if err != nil {
			t.Fatal(err)
		}
		var back Mode
		if err := back.UnmarshalText(text); err != nil || back != m {
			t.Errorf("%s: round trip gave %v, %v", m, back, err)
		}
	}
	if got := Modes(); len(got) != 5 || got[0] != StandAlone || got[4] != HybridParallel {
		t.Errorf("Modes() = %v", got)
	}
}

// A `with` block decoding into a Mode field holds a valid mode or fails
// naming the valid ones.
func TestModeDecodesFromJSON(t *testing.T) {
	var w struct {
		Mode Mode `json:"mode"`
	}
	if err := json.Unmarshal([]byte(`{"mode":"data_parallel"}`), &w); err != nil || w.Mode != DataParallel {
		t.Fatalf("decode data_parallel: %v, %v", w.Mode, err)
	}
	err := json.Unmarshal([]byte(`{"mode":"model_parallel"}`), &w)
	if !errors.Is(err, ErrUnknownMode) {
		t.Fatalf("decode model_parallel: %v, want ErrUnknownMode", err)
	}
	want := `unknown parallel mode "model_parallel" (valid: stand_alone, data_parallel, semi_auto_parallel, auto_parallel, hybrid_parallel)`
	if !strings.Contains(err.Error(), want) {
		t.Errorf("error %q does not say %q", err, want)
	}
	if _, err := Mode(9).MarshalText(); !errors.Is(err, ErrUnknownMode) {
		t.Errorf("marshal Mode(9): %v", err)
	}
}

func TestModeProperties(t *testing.T) {
	for _, tc := range []struct {
		m                                              Mode
		oneDevice, collective, shards, splits, sharded bool
	}{
		{StandAlone, true, false, false, false, false},
		{DataParallel, false, true, true, false, false},
		{SemiAutoParallel, false, true, true, true, true},
		{AutoParallel, false, true, true, true, true},
		{HybridParallel, false, true, true, false, true},
	} {
		got := [5]bool{tc.m.OneDevice(), tc.m.Collective(), tc.m.ShardsData(), tc.m.SplitsOperators(), tc.m.Sharded()}
		want := [5]bool{tc.oneDevice, tc.collective, tc.shards, tc.splits, tc.sharded}
		if got != want {
			t.Errorf("%s: one device, collective, shards data, splits operators, sharded = %v, want %v", tc.m, got, want)
		}
	}
}

// A strategy is taken by semi_auto_parallel from the user and by
// auto_parallel from its search, by no other mode, and each refusal says
// why.
func TestModeCheckStrategy(t *testing.T) {
	for _, tc := range []struct {
		m              Mode
		user, searched string // "" for taken, else what the refusal says
	}{
		{StandAlone, "mode stand_alone takes none: it does not split operators", "it does not split operators"},
		{DataParallel, "mode data_parallel takes none: it does not split operators", "it does not split operators"},
		{SemiAutoParallel, "", ""},
		{AutoParallel, "it searches every operator's strategy itself", ""},
		{HybridParallel, "mode hybrid_parallel takes none: the model declares its own split", "the model declares its own split"},
	} {
		for _, c := range []struct {
			searched bool
			want     string
		}{{false, tc.user}, {true, tc.searched}} {
			err := tc.m.CheckStrategy(c.searched)
			if c.want == "" && err != nil || c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
				t.Errorf("%s, searched %v: %v, want %q", tc.m, c.searched, err, c.want)
			}
		}
	}
}

func TestModeSchemaListsEveryMode(t *testing.T) {
	s := StandAlone.JSONSchema()
	enum, _ := s["enum"].([]any)
	if s["type"] != "string" || len(enum) != len(Modes()) || s["default"] != "stand_alone" {
		t.Fatalf("schema %v", s)
	}
	for i, m := range Modes() {
		if enum[i] != m.String() {
			t.Errorf("enum[%d] = %v, want %s", i, enum[i], m)
		}
	}
}
