package auth

import (
	"fmt"
	"strings"
)

// MaxPatternLen is the longest pattern (a subject is at most 200 bytes).
const MaxPatternLen = 201

// ValidatePattern reports whether p is a valid subject or group pattern:
// "*", or characters of [A-Za-z0-9._-] with at most one "*", at the end.
func ValidatePattern(p string) error {
	if p == "" || len(p) > MaxPatternLen {
		return fmt.Errorf("%w: pattern %q: 1 to %d characters", ErrInvalid, p, MaxPatternLen)
	}
	body := strings.TrimSuffix(p, "*")
	for i := 0; i < len(body); i++ {
		if !nameChar(body[i]) {
			return fmt.Errorf("%w: pattern %q: character %q (use A-Z a-z 0-9 . _ - and a trailing *)", ErrInvalid, p, body[i])
		}
	}
	return nil
}

// Match reports whether pattern p matches name s.
func Match(p, s string) bool {
	if prefix, ok := strings.CutSuffix(p, "*"); ok {
		return strings.HasPrefix(s, prefix)
	}
	return p == s
}

// matcher is a compiled set of patterns.
type matcher struct {
	all      bool
	exact    map[string]struct{}
	prefixes []string
}

func compile(patterns []string) matcher {
	var m matcher
	for _, p := range patterns {
		switch prefix, ok := strings.CutSuffix(p, "*"); {
		case p == "*":
			m.all = true
		case ok:
			m.prefixes = append(m.prefixes, prefix)
		default:
			if m.exact == nil {
				m.exact = make(map[string]struct{}, len(patterns))
			}
			m.exact[p] = struct{}{}
		}
	}
	return m
}

func (m *matcher) match(s string) bool {
	if m.all {
		return true
	}
	if _, ok := m.exact[s]; ok {
		return true
	}
	for _, p := range m.prefixes {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}

func (m *matcher) empty() bool { return !m.all && len(m.exact) == 0 && len(m.prefixes) == 0 }
