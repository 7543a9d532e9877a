// Package logging builds the zap loggers every QMQ-Go binary uses: JSON to
// stderr by default (production sampling, ISO-8601 timestamps under "ts"),
// a human console format with Dev, and a level that can change at run time
// (Options.Level parses "debug", "info", "warn", "error").
//
// Libraries never build loggers: they take a *zap.Logger (nil means
// zap.NewNop()) and name a child per component with Named. Only the mains in
// <part>/cmd call New.
package logging
