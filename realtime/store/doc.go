// Package store is the realtime broker's storage: message log, consume logs,
// pull logs, action log and checkpoints, with no networking.
package store
