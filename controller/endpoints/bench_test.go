package endpoints

import (
	"fmt"
	"testing"

	discoveryv1 "k8s.io/api/discovery/v1"
)

// BenchmarkDesired computes one Service's desired servers from 100 slices
// of 100 endpoints (10,000 endpoints), a tenth of them terminating.
func BenchmarkDesired(b *testing.B) {
	var slices []discoveryv1.EndpointSlice
	for s := 0; s < 100; s++ {
		var eps []discoveryv1.Endpoint
		for e := 0; e < 100; e++ {
			c := cond{t_, t_, f_}
			if e%10 == 0 {
				c = cond{f_, t_, t_}
			}
			eps = append(eps, ep(fmt.Sprintf("198.18.%d.%d", s, e+1), c, fmt.Sprintf("pod-%d-%d", s, e)))
		}
		slices = append(slices, slice(fmt.Sprint(s), discoveryv1.AddressTypeIPv4, httpPort, eps...))
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Desired(slices, "http", Options{}); err != nil {
			b.Fatal(err)
		}
	}
}
