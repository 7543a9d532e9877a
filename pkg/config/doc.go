// Package config loads a server's options from flags and an optional YAML
// file with one precedence rule: defaults < file < flags given on the command
// line.
//
// Each server owns an Options struct (with `yaml` tags, a NewOptions holding
// every default, and Validate), binds its flags to the struct's fields, and
// calls Parse:
//
//	opts := realtime.NewOptions()
//	fs := flag.NewFlagSet("qmq-realtime", flag.ExitOnError)
//	opts.AddFlags(fs)
//	if err := config.Parse(fs, os.Args[1:], &opts); err != nil { ... }
//	if err := opts.Validate(); err != nil { ... }
//
// Parse adds a --config flag naming the YAML file. Unknown YAML keys are an
// error, so a typo in a config file does not pass silently.
package config
