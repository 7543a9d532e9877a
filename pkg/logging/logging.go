package logging

import (
	"flag"
	"fmt"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// Options choose the format and level of a logger.
type Options struct {
	// Level is the minimum level: debug, info, warn or error (default info).
	Level string `yaml:"level"`
	// Dev selects the console format with colours off and stack traces from
	// warnings, for people reading a terminal (default false: JSON).
	Dev bool `yaml:"dev"`
}

// NewOptions returns the defaults.
func NewOptions() Options { return Options{Level: "info"} }

// Validate checks the level.
func (o Options) Validate() error {
	if _, err := zap.ParseAtomicLevel(o.Level); err != nil {
		return fmt.Errorf("logging: bad level %q: %w", o.Level, err)
	}
	return nil
}

// AddFlags registers --log-level and --dev on fs, bound to o.
func (o *Options) AddFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.Level, "log-level", o.Level, "minimum log level: debug, info, warn, error")
	fs.BoolVar(&o.Dev, "dev", o.Dev, "log in a human console format instead of JSON")
}

// New builds a logger from o. The returned level can be changed at run time.
func New(o Options) (*zap.Logger, zap.AtomicLevel, error) {
	if err := o.Validate(); err != nil {
		return nil, zap.AtomicLevel{}, err
	}
	lvl, _ := zap.ParseAtomicLevel(o.Level)
	var cfg zap.Config
	if o.Dev {
		cfg = zap.NewDevelopmentConfig()
		cfg.DisableStacktrace = true
	} else {
		cfg = zap.NewProductionConfig()
		cfg.EncoderConfig.TimeKey = "ts"
		cfg.EncoderConfig.EncodeTime = zapcore.ISO8601TimeEncoder
	}
	cfg.Level = lvl
	lg, err := cfg.Build()
	if err != nil {
		return nil, zap.AtomicLevel{}, fmt.Errorf("logging: %w", err)
	}
	return lg, lvl, nil
}

// OrNop returns lg, or a no-op logger when lg is nil.
func OrNop(lg *zap.Logger) *zap.Logger {
	if lg == nil {
		return zap.NewNop()
	}
	return lg
}
