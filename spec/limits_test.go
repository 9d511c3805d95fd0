package spec

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/mspipe/mspipe/npu/ranktable"
	"github.com/mspipe/mspipe/schemas"
)

// The published schema's device limit is the one the launcher enforces,
// and validate refuses what run would refuse: before, validate accepted
// cluster.devices: 100000 and run then failed.
func TestDeviceLimitIsOneLimit(t *testing.T) {
	var doc struct {
		Defs struct {
			Cluster struct {
				Properties struct {
					Devices struct {
						AnyOf []struct {
							Maximum *int `json:"maximum"`
						} `json:"anyOf"`
					} `json:"devices"`
				} `json:"properties"`
			} `json:"cluster"`
		} `json:"$defs"`
	}
	if err := json.Unmarshal(schemas.Pipeline, &doc); err != nil {
		t.Fatal(err)
	}
	var max int
	for _, alt := range doc.Defs.Cluster.Properties.Devices.AnyOf {
		if alt.Maximum != nil {
			max = *alt.Maximum
		}
	}
	if want := 8 * ranktable.MaxLocalHosts; max != want {
		t.Errorf("schema allows up to %d devices, the launcher %d", max, want)
	}
	if err := CheckDeviceCount(max); err != nil {
		t.Errorf("the largest count the schema allows is refused: %v", err)
	}
	for _, n := range []int{max + 8, 100000} {
		if err := CheckDeviceCount(n); err == nil || !strings.Contains(err.Error(), "give a rank_table") {
			t.Errorf("CheckDeviceCount(%d) = %v, want a refusal pointing to rank_table", n, err)
		}
	}
	if _, err := ranktable.Generate(ranktable.GenerateOptions{Devices: 8, Hosts: ranktable.MaxLocalHosts, Scheme: ranktable.SchemeLocal}); err != nil {
		t.Errorf("the local scheme cannot generate the largest cluster specs allow: %v", err)
	}
}
