package protocol

// CmdSyncLogAhead is a pipelined CmdSyncLog fetch (the same SyncRequest and
// SyncResponse bodies): a slave sends it while an earlier fetch of its
// connection is still unanswered, and the master answers it after that
// one, from where that one's chunks ended (the request's offsets, the ends
// the slave had received when it sent it, are a lower bound). The fetches
// of a connection since its latest CmdSyncLog form one stream, answered in
// order; once an answer of a stream is a cut, its later fetches are
// answered with the same cut, and the slave asks again with a CmdSyncLog.
// A slave so keeps a fetch parked at its master while it takes in the
// answer before, and records reach it as they are written. A master that
// does not know the command answers StatusUnknownCommand, and the slave
// falls back to one CmdSyncLog in flight; a master answers StatusBadRequest
// when the connection has no stream (no CmdSyncLog fetch before it).
const CmdSyncLogAhead Command = 53

func init() { commandNames[CmdSyncLogAhead] = "sync-log-ahead" }
