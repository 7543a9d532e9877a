package config

import (
	"flag"
	"strings"
)

// StringList binds a comma-separated (or repeated) list flag to *list. The
// first use of the flag replaces whatever *list held (a default, or a
// value from the config file or the environment); later uses add to it.
func StringList(fs *flag.FlagSet, list *[]string, name, usage string) {
	fs.Var(&stringList{list: list}, name, usage)
}

type stringList struct {
	list *[]string
	set  bool
}

func (l *stringList) String() string {
	if l.list == nil {
		return ""
	}
	return strings.Join(*l.list, ",")
}

func (l *stringList) Set(v string) error {
	if !l.set {
		*l.list, l.set = nil, true
	}
	for _, p := range strings.Split(v, ",") {
		if p = strings.TrimSpace(p); p != "" {
			*l.list = append(*l.list, p)
		}
	}
	return nil
}
