// Package archtest holds no code: its test checks the import rules of
// DESIGN §1 with `go list -deps`, so a change that breaks them fails the gate:
//
//   - storage packages (realtime/store, delay/store) import no networking
//     package of ours and no gnet or etcd;
//   - producer and consumer import no server package;
//   - no server package imports another;
//   - pkg/protocol imports nothing of ours;
//   - nothing under pkg/ imports a part above it.
package archtest
