package main

import (
	"runtime"
	"testing"
)

func TestSpareProc(t *testing.T) {
	before := runtime.GOMAXPROCS(0)
	t.Cleanup(func() { runtime.GOMAXPROCS(before) })
	tests := []struct {
		env  string
		want int
	}{
		{"", before + 1},
		{"3", before}, // GOMAXPROCS set: the runtime already follows it
	}
	for _, tt := range tests {
		runtime.GOMAXPROCS(before)
		spareProc(tt.env)
		if got := runtime.GOMAXPROCS(0); got != tt.want {
			t.Errorf("spareProc(%q): GOMAXPROCS %d, want %d", tt.env, got, tt.want)
		}
	}
}
