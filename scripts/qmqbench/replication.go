package main

// The replication suite: the produce suite's producer worker sends 256-byte
// messages for a fixed time to bin/qmq-realtime alone (durable flush, no
// slave) and to a master started with --wait-slave whose slave is a second
// qmq-realtime process (--role slave), so every ack waits for the slave's
// fdatasync too. Rounds alternate so both see the same machine, and each
// starts once the disks are quiet (settleRound), so that no run measures
// the writeback of the one before it.
//
//	produce_alone_msgs_per_s        the master alone
//	produce_wait_slave_msgs_per_s   master + slave, --wait-slave
//	produce_wait_slave_ratio        wait-slave / alone (target ≥ 0.7)
//
// Then automatic failover (replication_failover.go): failover_seconds,
// failover_seconds_mean and failover_lost_acked over ten SIGKILLs of the
// master. The suite replication-ratio runs the produce rounds only.

import (
	"fmt"
	"path/filepath"
	"time"
)

const (
	replicationDuration = 6 * time.Second
	replicationRounds   = 3
)

func init() {
	register("replication", runReplication)
	register("replication-ratio", runReplicationRatio)
}

func runReplication(env *Env) error {
	if err := runReplicationRatio(env); err != nil {
		return err
	}
	return runReplicationFailover(env)
}

// runReplicationRatio runs only the alternating produce rounds (the quick
// suite replication-ratio): the same figures as replication's first part.
func runReplicationRatio(env *Env) error {
	var alone, waited float64
	for round := 0; round < replicationRounds; round++ {
		env.settleRound()
		a, err := env.produceOurs(filepath.Join(env.Dir, fmt.Sprint("alone", round)), replicationDuration)
		if err != nil {
			return fmt.Errorf("alone: %w", err)
		}
		env.settleRound()
		w, err := env.produceWaitSlave(filepath.Join(env.Dir, fmt.Sprint("pair", round)), replicationDuration)
		if err != nil {
			return fmt.Errorf("wait-slave: %w", err)
		}
		env.Logf("round %d: alone %.0f msg/s, wait-slave %.0f msg/s (%.2f)", round, a, w, w/a)
		alone += a / replicationRounds
		waited += w / replicationRounds
	}
	env.Metric("produce_alone_msgs_per_s", alone, "msg/s")
	env.Metric("produce_wait_slave_msgs_per_s", waited, "msg/s")
	env.Metric("produce_wait_slave_ratio", waited/alone, "x")
	return nil
}

// produceWaitSlave runs a master with --wait-slave and its slave, and the
// produce worker against the master.
func (e *Env) produceWaitSlave(dir string, d time.Duration) (float64, error) {
	m, addr, err := e.startRealtime(filepath.Join(dir, "master"), "--wait-slave")
	if err != nil {
		return 0, err
	}
	defer m.stop()
	s, _, err := e.startRealtime(filepath.Join(dir, "slave"), "--role", "slave", "--master", addr)
	if err != nil {
		return 0, err
	}
	defer s.stop()
	var res rateResult
	if err := runWorker("produce", &res, "-addr", addr, "-duration", d.String(), "-subjects", "1"); err != nil {
		return 0, err
	}
	if res.Failed > 0 {
		return 0, fmt.Errorf("%d sends failed", res.Failed)
	}
	e.Logf("qmq wait-slave: %d messages in %v", res.Messages, res.Elapsed)
	// Where a reply's time went: the master's own append (its fdatasync
	// included), then the wait for the slave's copy.
	e.logHistograms(argAfter(m.cmd.Args, "--http-addr"), "qmq_realtime_append_seconds", "qmq_realtime_slave_wait_seconds")
	return res.rate(), nil
}
