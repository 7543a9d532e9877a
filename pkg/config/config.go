package config

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"gopkg.in/yaml.v3"
)

// ErrConfigFile wraps every failure to read or decode the config file.
var ErrConfigFile = errors.New("config file")

// Parse loads the YAML file named by --config (if args give one) into opts,
// then parses args into fs, so explicit flags win over the file and the
// file wins over defaults. fs must not already define "config". List flags
// should use StringList so that a flag replaces the file's list instead of
// adding to it.
func Parse(fs *flag.FlagSet, args []string, opts any) error {
	fs.String("config", "", "YAML config file (flags given on the command line override it)")
	if path := configArg(args); path != "" {
		if err := Load(path, opts); err != nil {
			return err
		}
	}
	return fs.Parse(args)
}

// configArg finds the value of -config/--config in args (as "-config x" or
// "-config=x"), stopping where flag parsing stops.
func configArg(args []string) string {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" || !strings.HasPrefix(a, "-") || a == "-" {
			return ""
		}
		name := strings.TrimLeft(a, "-")
		if v, ok := strings.CutPrefix(name, "config="); ok {
			return v
		}
		if name == "config" && i+1 < len(args) {
			return args[i+1]
		}
	}
	return ""
}

// StringList binds a comma-separated (or repeated) list flag to *list. The
// first use of the flag replaces whatever *list held (a default or the
// config file's list); later uses add to it.
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

// Load decodes the YAML file at path into opts, rejecting unknown keys.
func Load(path string, opts any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrConfigFile, err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	// An empty file is valid: the decoder returns io.EOF for it.
	if err := dec.Decode(opts); err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("%w %s: %w", ErrConfigFile, path, err)
	}
	return nil
}
