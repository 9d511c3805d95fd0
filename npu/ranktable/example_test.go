package ranktable_test

import (
	"fmt"
	"os"

	"github.com/mspipe/mspipe/npu/ranktable"
)

func ExampleGenerate() {
	table, err := ranktable.Generate(ranktable.GenerateOptions{DeviceRange: "4-5", Scheme: ranktable.SchemeLocal})
	if err != nil {
		fmt.Println(err)
		return
	}
	os.Stdout.Write(table.Encode())
	// Output:
	// {
	//     "version": "1.0",
	//     "server_count": "1",
	//     "server_list": [
	//         {
	//             "server_id": "127.0.0.1",
	//             "device": [
	//                 {"device_id": "4","device_ip": "127.1.0.5","rank_id": "0"},
	//                 {"device_id": "5","device_ip": "127.1.0.6","rank_id": "1"}],
	//              "host_nic_ip": "reserve"
	//         }
	//     ],
	//     "status": "completed"
	// }
}

func ExampleCheck() {
	data := []byte(`{
    "version": "1.0",
    "server_count": "1",
    "server_list": [
        {
            "server_id": "10.0.0.1",
            "device": [
                {"device_id": "0","device_ip": "192.1.27.6","rank_id": "0"},
                {"device_id": "1","device_ip": "192.2.27.6","rank_id": "1"},
                {"device_id": "2","device_ip": "192.3.27.6","rank_id": "2"}],
             "host_nic_ip": "reserve"
        }
    ],
    "status": "completed"
}`)
	_, problems := ranktable.Check("rank_table.json", data)
	for _, p := range problems {
		fmt.Println(p)
	}
	// Output:
	// rank_table.json:7:23: error: server_list[0] has 3 devices; HCCL supports 1, 2, 4 or 8 devices on one host
}
