package procs

import "testing"

// TestServing: a server runs on half the CPUs (at least one) unless
// GOMAXPROCS is set, which then stands as the runtime applied it.
func TestServing(t *testing.T) {
	for _, c := range []struct {
		cpus int
		env  string
		want int
	}{
		{1, "", 1},
		{2, "", 1},
		{3, "", 1},
		{4, "", 2},
		{16, "", 8},
		{2, "2", 2},
		{8, "8", 8},
		{1, "1", 1},
	} {
		if got := Serving(c.cpus, c.env); got != c.want {
			t.Errorf("Serving(%d, %q) = %d, want %d", c.cpus, c.env, got, c.want)
		}
	}
}
