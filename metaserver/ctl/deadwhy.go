package ctl

import (
	"time"
	"unicode/utf8"

	"github.com/qmq-go/qmq/metaserver/api"
)

// diedAt is when a dead letter's last delivery failed, in local time, or
// "-" when its consumer did not record it.
func diedAt(l api.DeadLetter) string {
	if l.FailedAt == nil {
		return "-"
	}
	return l.FailedAt.Local().Format(time.RFC3339)
}

// shorten cuts s to at most n runes, marking the cut with "…".
func shorten(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n]) + "…"
}
