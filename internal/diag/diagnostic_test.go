package diag

import (
	"errors"
	"fmt"
	"testing"
)

func TestDiagnosticString(t *testing.T) {
	tests := []struct {
		d    Diagnostic
		want string
	}{
		{Diagnostic{File: "p.yaml", Line: 3, Column: 20, Message: "bad"}, "p.yaml:3:20: error: bad"},
		{Diagnostic{File: "p.yaml", Line: 3, Severity: Warning, Message: "w"}, "p.yaml:3: warning: w"},
		{Diagnostic{File: "p.yaml", Message: "too large"}, "p.yaml: error: too large"},
		{Diagnostic{Message: "server_list[0]: no devices"}, "error: server_list[0]: no devices"},
		// A column without a line is no position.
		{Diagnostic{File: "f", Column: 4, Message: "m"}, "f: error: m"},
	}
	for _, tt := range tests {
		if got := tt.d.String(); got != tt.want {
			t.Errorf("String() = %q, want %q", got, tt.want)
		}
		if got := tt.d.Error(); got != tt.want {
			t.Errorf("Error() = %q, want %q", got, tt.want)
		}
	}
}

func TestListSortKeepsOrderAtOnePlace(t *testing.T) {
	l := List{
		{File: "b", Line: 1, Message: "b1"},
		{File: "a", Line: 9, Column: 2, Message: "a9:2"},
		{File: "a", Line: 9, Column: 1, Message: "first at a9:1"},
		{File: "a", Line: 10, Column: 1, Message: "a10"},
		{File: "a", Line: 9, Column: 1, Message: "second at a9:1"},
		{File: "a", Message: "whole file"},
	}
	l.Sort()
	var got []string
	for _, d := range l {
		got = append(got, d.Message)
	}
	want := []string{"whole file", "first at a9:1", "second at a9:1", "a9:2", "a10", "b1"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("sorted %q, want %q", got, want)
	}
}

func TestListErr(t *testing.T) {
	w := Diagnostic{File: "f", Line: 1, Column: 1, Severity: Warning, Message: "w"}
	e1 := Diagnostic{File: "f", Line: 2, Column: 1, Message: "e1"}
	e2 := Diagnostic{File: "f", Line: 3, Column: 1, Message: "e2"}
	e3 := Diagnostic{File: "f", Line: 4, Column: 1, Message: "e3"}

	if err := (List{w, w}).Err(); err != nil {
		t.Errorf("warnings only: Err() = %v, want nil", err)
	}
	if (List{w}).HasErrors() || !(List{w, e1}).HasErrors() {
		t.Error("HasErrors disagrees with the severities")
	}
	if errs, warns := (List{w, e1, w, e2}).Count(); errs != 2 || warns != 2 {
		t.Errorf("Count() = %d, %d; want 2, 2", errs, warns)
	}
	tests := []struct {
		l    List
		want string
	}{
		{List{w, e1}, "f:2:1: error: e1"},
		{List{e1, w, e2}, "f:2:1: error: e1 (and 1 more error)"},
		{List{e1, e2, w, e3}, "f:2:1: error: e1 (and 2 more errors)"},
	}
	for _, tt := range tests {
		err := tt.l.Err()
		if err == nil || err.Error() != tt.want {
			t.Errorf("Err() = %v, want %q", err, tt.want)
		}
	}
	// Every error is reachable with errors.As; warnings are not in Err.
	var l List
	if !errors.As(List{w, e1, e2}.Err(), &l) || len(l) != 2 {
		t.Fatalf("errors.As(List) = %v", l)
	}
	var d Diagnostic
	if !errors.As(List{w, e2}.Err(), &d) || d.Message != "e2" {
		t.Errorf("errors.As(Diagnostic) = %v, want e2", d)
	}
	if got := (List{}).Error(); got != "no errors" {
		t.Errorf("empty list Error() = %q", got)
	}
}
