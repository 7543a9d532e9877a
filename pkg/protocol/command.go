package protocol

import "strconv"

// Command names a request. Codes are grouped by the server that serves them:
// 1–9 any server, 10–29 realtime and delay brokers, 30–49 meta server,
// 50–69 replication.
type Command uint16

const (
	// CmdPing echoes its body; every server answers it.
	CmdPing Command = 1

	// CmdSend appends a batch of messages (SendRequest → SendResponse).
	CmdSend Command = 10
	// CmdPull asks for messages of a (subject, group) for one consumer
	// (PullRequest → PullResponse).
	CmdPull Command = 11
	// CmdAck acknowledges a range of a consumer's pull sequences (AckRequest).
	CmdAck Command = 12
	// CmdConsumerManage changes a consumer group's state on a broker: reset
	// its offset, take a consumer offline or online.
	CmdConsumerManage Command = 13
	// CmdBrokerStats asks a broker for its subjects, groups and backlog.
	CmdBrokerStats Command = 14
	// CmdDeadLetters lists, re-drives or purges a group's dead letters.
	CmdDeadLetters Command = 15

	// CmdRegister registers a broker with the meta server, or heartbeats it.
	CmdRegister Command = 30
	// CmdLookup asks the meta server for the broker groups of a subject.
	CmdLookup Command = 31
	// CmdClientHeartbeat keeps a consumer's registration alive.
	CmdClientHeartbeat Command = 32

	// CmdSyncLog asks a master for raw log bytes past an offset.
	CmdSyncLog Command = 50
	// CmdSyncCheckpoint asks a master for its latest checkpoints.
	CmdSyncCheckpoint Command = 51
)

var commandNames = map[Command]string{
	CmdPing:            "ping",
	CmdSend:            "send",
	CmdPull:            "pull",
	CmdAck:             "ack",
	CmdConsumerManage:  "consumer-manage",
	CmdBrokerStats:     "broker-stats",
	CmdDeadLetters:     "dead-letters",
	CmdRegister:        "register",
	CmdLookup:          "lookup",
	CmdClientHeartbeat: "client-heartbeat",
	CmdSyncLog:         "sync-log",
	CmdSyncCheckpoint:  "sync-checkpoint",
}

// String returns the command's name, or its number when unknown.
func (c Command) String() string {
	if s, ok := commandNames[c]; ok {
		return s
	}
	return "command(" + strconv.Itoa(int(c)) + ")"
}
