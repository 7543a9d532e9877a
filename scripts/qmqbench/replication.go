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
//	produce_wait_slave_tmpfs_ratio  the same pair with the slave's data on
//	                                tmpfs, / alone: no target, a diagnostic
//
// Both brokers of the pair write one file system on the machine's one
// disk, where two brokers on two machines each have their own. The tmpfs
// round shows the pair without that share: the slave still writes,
// fdatasyncs (free on tmpfs) and acknowledges, on the same cores, but its
// copy is not durable, so that figure is for reading the first one only
// (realtime/NOTES.md, "One filesystem for master and slave"). It runs when
// /dev/shm is a tmpfs.
//
// Then automatic failover (replication_failover.go): failover_seconds,
// failover_seconds_mean and failover_lost_acked over ten SIGKILLs of the
// master. The suite replication-ratio runs the produce rounds only.

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
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
	var alone, waited, onTmpfs float64
	shm := tmpfsDir()
	for round := 0; round < replicationRounds; round++ {
		env.settleRound()
		a, err := env.produceOurs(filepath.Join(env.Dir, fmt.Sprint("alone", round)), replicationDuration)
		if err != nil {
			return fmt.Errorf("alone: %w", err)
		}
		env.settleRound()
		dir := filepath.Join(env.Dir, fmt.Sprint("pair", round))
		w, err := env.produceWaitSlave(dir, filepath.Join(dir, "slave"), replicationDuration)
		if err != nil {
			return fmt.Errorf("wait-slave: %w", err)
		}
		env.Logf("round %d: alone %.0f msg/s, wait-slave %.0f msg/s (%.2f)", round, a, w, w/a)
		alone += a / replicationRounds
		waited += w / replicationRounds
		if shm == "" {
			continue
		}
		env.settleRound()
		t, err := env.produceWaitSlaveOnTmpfs(filepath.Join(env.Dir, fmt.Sprint("pair-tmpfs", round)), shm)
		if err != nil {
			return fmt.Errorf("wait-slave, slave on tmpfs: %w", err)
		}
		env.Logf("round %d: wait-slave with the slave's data on tmpfs %.0f msg/s (%.2f)", round, t, t/a)
		onTmpfs += t / replicationRounds
	}
	env.Metric("produce_alone_msgs_per_s", alone, "msg/s")
	env.Metric("produce_wait_slave_msgs_per_s", waited, "msg/s")
	env.Metric("produce_wait_slave_ratio", waited/alone, "x")
	if shm == "" {
		env.Logf("/dev/shm is not a tmpfs: no round with the slave's data on tmpfs")
		return nil
	}
	env.Metric("produce_wait_slave_tmpfs_msgs_per_s", onTmpfs, "msg/s")
	env.Metric("produce_wait_slave_tmpfs_ratio", onTmpfs/alone, "x")
	return nil
}

// tmpfsDir returns /dev/shm when it is a tmpfs, or "".
func tmpfsDir() string {
	var st unix.Statfs_t
	if err := unix.Statfs("/dev/shm", &st); err != nil || st.Type != unix.TMPFS_MAGIC {
		return ""
	}
	return "/dev/shm"
}

// produceWaitSlaveOnTmpfs is produceWaitSlave with the slave's data in a
// directory of its own under shm, removed afterwards.
func (e *Env) produceWaitSlaveOnTmpfs(dir, shm string) (float64, error) {
	slaveDir, err := os.MkdirTemp(shm, "qmqbench-slave-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(slaveDir)
	return e.produceWaitSlave(dir, slaveDir, replicationDuration)
}

// produceWaitSlave runs a master with --wait-slave (its data under dir)
// and its slave (its data in slaveDir), and the produce worker against
// the master.
func (e *Env) produceWaitSlave(dir, slaveDir string, d time.Duration) (float64, error) {
	m, addr, err := e.startRealtime(filepath.Join(dir, "master"), "--wait-slave")
	if err != nil {
		return 0, err
	}
	defer m.stop()
	s, _, err := e.startRealtime(slaveDir, "--role", "slave", "--master", addr)
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
