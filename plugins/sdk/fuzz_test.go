package sdk

import (
	"context"
	"testing"

	"github.com/mspipe/mspipe/plugins"
)

// FuzzValidate feeds arbitrary `with` blocks to a typed stage: Validate must
// never fail or panic, and a block it accepts must decode for Run.
func FuzzValidate(f *testing.F) {
	for _, seed := range []string{
		`{"data":"d"}`, `{"data":"d","epochs":3,"lr":0.5,"mode":"data_parallel","layers":["fc"],"timeout":"1m"}`,
		`{"epochs":"x"}`, `{"data":"d","options":{"seed":1.5}}`, `{"data":"d","timeout":-3}`, `{"data":"d","layers":null}`,
	} {
		f.Add([]byte(seed))
	}
	s := trainStage()
	f.Fuzz(func(t *testing.T, data []byte) {
		with, err := plugins.DecodeJSONObject(data)
		if err != nil {
			return
		}
		problems, err := s.Validate(context.Background(), plugins.ValidateRequest{With: with})
		if err != nil {
			t.Fatalf("Validate(%s): %v", data, err)
		}
		if len(problems) > 0 {
			return
		}
		if _, problems, err := s.decode(with); err != nil || len(problems) > 0 {
			t.Fatalf("accepted %s but decode gives %v, %v", data, problems, err)
		}
	})
}

// FuzzDuration checks that any JSON gives a non-negative duration or an
// error.
func FuzzDuration(f *testing.F) {
	for _, seed := range []string{`"90s"`, `1.5`, `"1h2m3.5s"`, `-1`, `1e300`, `"0"`, `null`} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var d Duration
		if err := d.UnmarshalJSON(data); err == nil && d < 0 {
			t.Fatalf("%s gave %v", data, d)
		}
	})
}
