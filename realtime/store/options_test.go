package store

import (
	"strings"
	"testing"
)

func TestOptionsValidate(t *testing.T) {
	if err := (Options{}).Validate(); err != nil {
		t.Fatalf("defaults invalid: %v", err)
	}
	for _, tc := range []struct {
		name    string
		o       Options
		setting string
	}{
		{"flush", Options{Flush: "sometimes"}, "Flush"},
		{"segment", Options{SegmentSize: 1 << 10}, "SegmentSize"},
		{"segment vs limits", Options{SegmentSize: 1 << 20}, "SegmentSize"},
		{"action segment", Options{ActionSegmentSize: 4096}, "ActionSegmentSize"},
		{"open files", Options{MaxOpenFiles: 2}, "MaxOpenFiles"},
		{"batch", Options{MaxBatchBytes: 10}, "MaxBatchBytes"},
		{"retention bytes", Options{RetentionBytes: -1}, "RetentionBytes"},
	} {
		err := tc.o.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.setting) {
			t.Errorf("%s: %v does not name %s", tc.name, err, tc.setting)
		}
	}
	if _, err := Open(t.TempDir(), Options{Flush: "never"}, nil); err == nil {
		t.Fatal("Open accepted invalid options")
	}
}
