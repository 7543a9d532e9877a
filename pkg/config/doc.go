// Package config gives every server binary one command line: cobra/pflag
// flags, a YAML file and the environment, loaded by one loader (koanf).
//
// Names: a flag's name is its YAML key and, upper-cased with '-' as '_'
// and prefixed QMQ_, its environment variable:
//
//	--data-dir /var/lib/qmq    data-dir: /var/lib/qmq    QMQ_DATA_DIR=/var/lib/qmq
//	--meta a:1,b:2             meta: [a:1, b:2]          QMQ_META=a:1,b:2
//
// A nested YAML map joins its names with '-' ("tls: {cert: F}" is
// --tls-cert F). Precedence: command line > environment > file > the
// defaults the Options' NewOptions holds and --help shows.
//
// Each server owns an Options struct (NewOptions with every default,
// Validate) and binds flags to its fields with AddFlags on a Go
// flag.FlagSet; the binary wires it:
//
//	opts := realtime.NewOptions()
//	fs := flag.NewFlagSet("qmq-realtime", flag.ContinueOnError)
//	opts.AddFlags(fs)
//	config.Server{Name: "qmq-realtime", Short: "...", Flags: fs,
//		Prepare: opts.Validate, Run: func() error { ... }}.Main()
//
// Server adds --config FILE, --check-config (validate, then exit without
// starting), --version (pkg/buildinfo: version, commit, Go version) and
// --help. A file key that names no flag is an error, so a
// typo does not pass silently; an environment variable that names no flag
// is ignored. Secrets never come from a flag default or --help: servers
// read them from files (--credentials-file) or from environment variables
// listed in Server.Reserved, which are never taken as flags. A Go flag
// whose usage starts "removed:" (an old spelling that now only refuses
// with advice) is hidden from --help and the environment.
//
// Flags are written --name (pflag); the Go flag package's -name spelling
// of a long flag is accepted too, so older command lines keep working.
//
// Exit codes: 0, ExitRun (1) when the server fails, ExitUsage (2) for bad
// flags, file, environment or options.
//
// List flags use StringList (or any flag.Value whose first Set replaces
// the default), so a value from the command line, environment or file
// replaces the default list instead of adding to it.
package config
