package config

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"gopkg.in/yaml.v3"
)

// ErrConfigFile wraps every failure to read or decode the config file.
var ErrConfigFile = errors.New("config file")

// Parse parses args into fs; when --config names a file, it loads that YAML
// file into opts and then applies the flags given in args again, so explicit
// flags win over the file and the file wins over defaults. fs must not
// already define "config".
func Parse(fs *flag.FlagSet, args []string, opts any) error {
	path := fs.String("config", "", "YAML config file (flags given on the command line override it)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *path == "" {
		return nil
	}
	// Remember the flags set explicitly, with their values, before the file
	// overwrites the fields they are bound to; then apply them again.
	var replay []string
	fs.Visit(func(f *flag.Flag) {
		if f.Name != "config" {
			replay = append(replay, "-"+f.Name+"="+f.Value.String())
		}
	})
	if err := Load(*path, opts); err != nil {
		return err
	}
	return fs.Parse(replay)
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
