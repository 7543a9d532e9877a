package config

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/qmq-go/qmq/pkg/buildinfo"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// Exit codes of a server binary.
const (
	ExitOK    = 0
	ExitRun   = 1 // the server failed to start or shut down uncleanly
	ExitUsage = 2 // bad flags, config file, environment or options
)

// Server describes the command line of one server binary.
type Server struct {
	// Name is the binary's name, e.g. qmq-realtime.
	Name string
	// Short is one line saying what it is.
	Short string
	// Long is more text for --help (optional).
	Long string
	// Flags holds the server's flags, bound to its options by
	// Options.AddFlags (Go flag style; served as --name).
	Flags *flag.FlagSet
	// Reserved names environment variables the server reads itself
	// (secrets), never taken as flags.
	Reserved []string
	// Prepare runs once every flag holds its value: secrets from the
	// environment, Validate. An error exits with ExitUsage.
	Prepare func() error
	// Run runs the server until it is told to stop. An error exits with
	// ExitRun.
	Run func() error
}

// usageError marks an error that exits with ExitUsage.
type usageError struct{ error }

func (e usageError) Unwrap() error { return e.error }

const configHelp = `
Every flag can also be set by a YAML key of the same name in --config FILE
(a nested map joins names with '-': "tls: {cert: F}" is --tls-cert F) or by
the environment variable QMQ_<FLAG NAME> with '-' as '_' (--data-dir is
QMQ_DATA_DIR). The command line wins over the environment, the environment
over the file, the file over the defaults shown below. --check-config
validates all of it and exits; scripts/config has a commented sample file.`

// Command is the cobra command of the server; Execute runs it.
func (s Server) Command(environ []string) *cobra.Command {
	var configFile string
	var checkOnly bool
	long := s.Short
	if s.Long != "" {
		long += "\n\n" + strings.TrimSpace(s.Long)
	}
	cmd := &cobra.Command{
		Use:           s.Name + " [flags]",
		Short:         s.Short,
		Long:          long + "\n" + configHelp,
		Version:       buildinfo.Read().String(),
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := Apply(cmd.Flags(), Sources{File: configFile, Environ: environ, Reserved: s.Reserved}); err != nil {
				return usageError{err}
			}
			if s.Prepare != nil {
				if err := s.Prepare(); err != nil {
					return usageError{err}
				}
			}
			if s.Run == nil || checkOnly {
				return nil
			}
			return s.Run()
		},
	}
	cmd.SetVersionTemplate("{{.Name}} {{.Version}}\n")
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	flags := cmd.Flags()
	if s.Flags != nil {
		flags.AddGoFlagSet(s.Flags)
		// A Go flag whose usage starts "removed:" only refuses an old
		// spelling with advice: keep it out of --help and the environment.
		flags.VisitAll(func(f *pflag.Flag) {
			if strings.HasPrefix(f.Usage, "removed:") {
				f.Hidden = true
			}
		})
	}
	flags.StringVar(&configFile, "config", "", "YAML file of flag values (keys are the flag names)")
	flags.BoolVar(&checkOnly, "check-config", false, "load and validate the flags, --config file and environment, then exit (0: valid) without starting")
	flags.SortFlags = true
	cmd.InitDefaultHelpFlag() // now, so -help and -version are known spellings too
	cmd.InitDefaultVersionFlag()
	return cmd
}

// Execute runs the command with args (os.Args[1:]) and returns the exit
// code, printing an error as "name: error" on stderr.
func (s Server) Execute(args, environ []string, stdout, stderr io.Writer) int {
	cmd := s.Command(environ)
	cmd.SetArgs(goFlagSpellings(cmd.Flags(), args)) // never nil: cobra reads os.Args for nil
	cmd.SetOut(stdout)
	cmd.SetErr(stderr)
	err := cmd.Execute()
	if err == nil {
		return ExitOK
	}
	fmt.Fprintf(stderr, "%s: %v\n", s.Name, err)
	var u usageError
	if errors.As(err, &u) || strings.HasPrefix(err.Error(), "unknown command") {
		return ExitUsage
	}
	return ExitRun
}

// Main runs the server with the process's arguments and environment and
// exits with its code.
func (s Server) Main() {
	os.Exit(s.Execute(os.Args[1:], os.Environ(), os.Stdout, os.Stderr))
}

// Parse parses args into fs the way a server binary does (--name flags,
// --config FILE, QMQ_* from environ) without running anything: for tests
// and programs that build their own command line.
func Parse(fs *flag.FlagSet, args, environ []string) error {
	cmd := Server{Name: fs.Name(), Flags: fs}.Command(environ)
	cmd.SetArgs(goFlagSpellings(cmd.Flags(), args))
	cmd.SetOut(io.Discard)
	cmd.SetErr(io.Discard)
	return cmd.Execute()
}

// goFlagSpellings returns a copy of args in which the Go flag package's
// single-dash spelling of a long flag (-data-dir x, -auth=true) is written
// with two dashes, so command lines written for the servers' earlier Go
// flag parsing keep working. Arguments after "--" and single-dash words
// that name no flag (such as the value -1s) are left alone.
func goFlagSpellings(fs *pflag.FlagSet, args []string) []string {
	out := make([]string, 0, len(args))
	for i, a := range args {
		if a == "--" {
			return append(out, args[i:]...)
		}
		if len(a) > 2 && a[0] == '-' && a[1] != '-' {
			name, _, _ := strings.Cut(a[1:], "=")
			if len(name) > 1 && fs.Lookup(name) != nil {
				a = "-" + a
			}
		}
		out = append(out, a)
	}
	return out
}
