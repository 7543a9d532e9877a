package protocol

import "strings"

// System subjects carry a kind between % signs, then the user's subject and
// consumer group: %RETRY%<subject>%<group> holds a group's messages waiting
// to be retried and %DEAD%<subject>%<group> those that ran out of attempts.
const (
	// KindRetry names retry subjects.
	KindRetry = "RETRY"
	// KindDead names dead-letter subjects.
	KindDead = "DEAD"
)

// RetrySubject returns the retry subject of (subject, group).
func RetrySubject(subject, group string) string { return "%" + KindRetry + "%" + subject + "%" + group }

// DeadSubject returns the dead-letter subject of (subject, group).
func DeadSubject(subject, group string) string { return "%" + KindDead + "%" + subject + "%" + group }

// IsSystemSubject reports whether s is a system subject.
func IsSystemSubject(s string) bool { return strings.HasPrefix(s, "%") }

// ParseSystemSubject splits %KIND%subject%group. It reports false unless kind
// is KindRetry or KindDead and subject and group are valid names.
func ParseSystemSubject(s string) (kind, subject, group string, ok bool) {
	if !strings.HasPrefix(s, "%") {
		return "", "", "", false
	}
	parts := strings.Split(s[1:], "%")
	if len(parts) != 3 || (parts[0] != KindRetry && parts[0] != KindDead) || !IsName(parts[1]) || !IsName(parts[2]) {
		return "", "", "", false
	}
	return parts[0], parts[1], parts[2], true
}

// RealSubject returns the user subject behind s: s itself for a user
// subject, the embedded subject for a system one.
func RealSubject(s string) string {
	if _, subject, _, ok := ParseSystemSubject(s); ok {
		return subject
	}
	return s
}
