package main

import (
	"strings"
	"testing"
)

func TestParseAndMedian(t *testing.T) {
	in := `goos: linux
BenchmarkOpen/runbox-2   	      10	 500 ns/op
BenchmarkOpen/raw-2      	      10	 400 ns/op
BenchmarkOpen/runbox-2   	      10	 900 ns/op
BenchmarkOpen/raw-2      	      10	 500 ns/op
BenchmarkOpen/runbox-2   	      10	 520 ns/op
BenchmarkOpen/raw-2      	      10	 510 ns/op
BenchmarkStream/runbox-2 	      10	 1000 ns/op	  60.5 MB/s
PASS`
	groups, order, err := parse(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if len(order) != 2 || order[0] != "Open" || order[1] != "Stream" {
		t.Fatalf("order %v", order)
	}
	if got := median(groups["Open"]["runbox"]).ns; got != 520 {
		t.Errorf("runbox median %v, want 520", got)
	}
	if got := median(groups["Open"]["raw"]).ns; got != 500 {
		t.Errorf("raw median %v, want 500", got)
	}
	if got := groups["Stream"]["runbox"][0].mbs; got != 60.5 {
		t.Errorf("MB/s %v", got)
	}
}

func TestFormatSmall(t *testing.T) {
	if got := formatRatio(0.000346); got != "0.000346" {
		t.Errorf("formatRatio: %q", got)
	}
	if got := formatRatio(1.25); got != "1.250" {
		t.Errorf("formatRatio: %q", got)
	}
	if got := format(row{ns: 71400}); got != "71.4 µs/op" {
		t.Errorf("format: %q", got)
	}
}
