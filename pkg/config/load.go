package config

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/knadh/koanf/parsers/yaml"
	"github.com/knadh/koanf/providers/env/v2"
	"github.com/knadh/koanf/providers/file"
	"github.com/knadh/koanf/v2"
	"github.com/spf13/pflag"
)

// ErrConfigFile wraps every failure to read or decode the config file, and
// a key in it that names no flag.
var ErrConfigFile = errors.New("config file")

// ErrEnvironment wraps a QMQ_* environment variable whose value its flag
// refuses.
var ErrEnvironment = errors.New("environment")

// EnvPrefix starts every environment variable that sets a flag:
// --meta-servers is QMQ_META_SERVERS.
const EnvPrefix = "QMQ_"

// EnvName is the environment variable that sets flag name.
func EnvName(flag string) string {
	return EnvPrefix + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// Sources says where Apply takes values from besides the command line.
type Sources struct {
	// File is the YAML file (--config); empty for none.
	File string
	// Environ lists the environment as KEY=value (os.Environ()).
	Environ []string
	// Reserved names environment variables that are not flags even when
	// their names match one (secrets the server reads itself, such as
	// QMQ_ADMIN_TOKEN).
	Reserved []string
}

// Apply sets every flag of fs that the command line did not set from the
// environment (QMQ_<FLAG>), else from the file (key = flag name), so the
// precedence is flag > environment > file > default. A YAML map nests
// names: "tls: {cert: x}" is tls-cert. A file key that names no flag is an
// error (a typo does not pass silently); an environment variable that
// names no flag is ignored (QMQ_* variables belong to other programs too).
// A key with no value (YAML null) leaves the flag alone. Hidden flags are
// never set from the environment.
func Apply(fs *pflag.FlagSet, src Sources) error {
	fileValues := map[string]any{}
	if src.File != "" {
		k := koanf.New(".")
		if err := k.Load(file.Provider(src.File), yaml.Parser()); err != nil {
			return fmt.Errorf("%w %s: %w", ErrConfigFile, src.File, err)
		}
		var unknown []string
		for key, v := range k.All() {
			name := strings.ReplaceAll(key, ".", "-")
			if f := fs.Lookup(name); f == nil || name == "config" || name == "check-config" {
				unknown = append(unknown, name)
				continue
			}
			fileValues[name] = v
		}
		if len(unknown) > 0 {
			sort.Strings(unknown)
			return fmt.Errorf("%w %s: unknown keys %s (keys are the flag names, see --help)", ErrConfigFile, src.File, strings.Join(unknown, ", "))
		}
	}
	envValues := map[string]string{}
	k := koanf.New(".")
	err := k.Load(env.Provider("", env.Opt{
		Prefix:      EnvPrefix,
		EnvironFunc: func() []string { return src.Environ },
		TransformFunc: func(key, v string) (string, any) {
			if slices.Contains(src.Reserved, key) {
				return "", nil
			}
			name := strings.ToLower(strings.ReplaceAll(strings.TrimPrefix(key, EnvPrefix), "_", "-"))
			if f := fs.Lookup(name); f == nil || f.Hidden || name == "config" || name == "check-config" {
				return "", nil
			}
			return name, v
		},
	}), nil)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrEnvironment, err)
	}
	for name, v := range k.All() {
		envValues[name] = fmt.Sprint(v)
	}

	var errs []error
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Changed {
			return
		}
		if v, ok := envValues[f.Name]; ok {
			if err := fs.Set(f.Name, v); err != nil {
				errs = append(errs, fmt.Errorf("%w: %s: %w", ErrEnvironment, EnvName(f.Name), err))
			}
			return
		}
		if v, ok := fileValues[f.Name]; ok && v != nil {
			if err := fs.Set(f.Name, flagValue(v)); err != nil {
				errs = append(errs, fmt.Errorf("%w %s: %s: %w", ErrConfigFile, src.File, f.Name, err))
			}
		}
	})
	return errors.Join(errs...)
}

// flagValue spells a YAML value as the command line would: a list as its
// comma-separated elements.
func flagValue(v any) string {
	if list, ok := v.([]any); ok {
		parts := make([]string, len(list))
		for i, e := range list {
			parts[i] = fmt.Sprint(e)
		}
		return strings.Join(parts, ",")
	}
	return fmt.Sprint(v)
}
