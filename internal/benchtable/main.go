// Command benchtable reads `go test -bench` output on stdin and prints, for
// every benchmark that has "runbox" and "raw" (or other baseline)
// sub-benchmarks, a table with the ratio runbox/baseline of time per
// operation. With -count N each figure is the median of the N runs, which
// tames the Engine's run-to-run noise. It passes the raw lines through to
// stderr.
package main

import (
	"bufio"
	"cmp"
	"fmt"
	"io"
	"maps"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
)

// line matches "BenchmarkName/variant-N  iters  123 ns/op [ 45.6 MB/s]".
var line = regexp.MustCompile(`^Benchmark(\S+)/(\S+?)(-\d+)?\s+\d+\s+([\d.]+) ns/op(?:\s+([\d.]+) MB/s)?`)

type row struct {
	ns, mbs float64
}

// median returns the row with the median time of rows.
func median(rows []row) row {
	sorted := slices.Clone(rows)
	slices.SortFunc(sorted, func(a, b row) int { return cmp.Compare(a.ns, b.ns) })
	return sorted[len(sorted)/2]
}

func main() {
	groups, order, err := parse(io.TeeReader(os.Stdin, os.Stderr))
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchtable:", err)
		os.Exit(1)
	}
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "benchmark\tbaseline\trunbox\tbaseline\tratio runbox/baseline\t")
	for _, name := range order {
		g := groups[name]
		runs, ok := g["runbox"]
		if !ok {
			continue
		}
		rb := median(runs)
		variants := slices.Sorted(maps.Keys(g))
		for _, variant := range variants {
			if variant == "runbox" {
				continue
			}
			base := median(g[variant])
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t\n", name, variant, format(rb), format(base), formatRatio(rb.ns/base.ns))
		}
	}
	w.Flush()
}

func parse(r io.Reader) (map[string]map[string][]row, []string, error) {
	groups := map[string]map[string][]row{}
	var order []string
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		m := line.FindStringSubmatch(strings.TrimSpace(sc.Text()))
		if m == nil {
			continue
		}
		ns, _ := strconv.ParseFloat(m[4], 64)
		mbs, _ := strconv.ParseFloat(m[5], 64)
		if groups[m[1]] == nil {
			groups[m[1]] = map[string][]row{}
			order = append(order, m[1])
		}
		groups[m[1]][m[2]] = append(groups[m[1]][m[2]], row{ns, mbs})
	}
	return groups, order, sc.Err()
}

// formatRatio keeps three significant digits of ratios far below 1 (a
// pooled Open against an Engine create), which "%.3f" would print as 0.
func formatRatio(r float64) string {
	if r < 0.1 {
		return fmt.Sprintf("%.3g", r)
	}
	return fmt.Sprintf("%.3f", r)
}

func format(r row) string {
	s := fmt.Sprintf("%.2f ms/op", r.ns/1e6)
	if r.ns < 1e5 {
		s = fmt.Sprintf("%.1f µs/op", r.ns/1e3)
	}
	if r.mbs > 0 {
		s += fmt.Sprintf(" (%.0f MB/s)", r.mbs)
	}
	return s
}
