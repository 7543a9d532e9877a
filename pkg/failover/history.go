package failover

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"os"
	"path/filepath"

	"github.com/qmq-go/qmq/pkg/fsutil"
	"github.com/qmq-go/qmq/pkg/protocol"
)

// Epoch history: the epochs whose masters wrote a store's logs, each with
// the log offsets it started at, kept in the file "epochs" of the data
// directory (written with fsutil.WriteFileAtomic: temp, fsync, rename, fsync
// dir). A store with two logs (realtime: the message and the action log)
// keeps both starts; one with a single log uses the first. Big-endian:
//
//	magic u32 "QEPH" | version u8 | count u16 |
//	count × (epoch u64 | message start i64 | action start i64) |
//	crc32c u32 over everything before it
//
// Entry i says: from these log offsets on, the logs were written by the
// master of that epoch (see protocol.SyncEpochRequest). A master appends
// an entry at its ends when it takes an epoch (before it serves); a slave
// takes its master's history (before it copies anything of that epoch).
const (
	// HistoryFile is the epoch history's file name in a data directory.
	HistoryFile   = "epochs"
	epochsMagic   = 0x51455048
	epochsVersion = 1
)

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// ErrHistoryDamaged: the epoch history file does not decode.
var ErrHistoryDamaged = errors.New("failover: epoch history file damaged")

func encodeEpochs(h []protocol.EpochStart) []byte {
	b := binary.BigEndian.AppendUint32(nil, epochsMagic)
	b = append(b, epochsVersion)
	b = binary.BigEndian.AppendUint16(b, uint16(len(h)))
	for _, e := range h {
		b = binary.BigEndian.AppendUint64(b, e.Epoch)
		b = binary.BigEndian.AppendUint64(b, uint64(e.MessageStart))
		b = binary.BigEndian.AppendUint64(b, uint64(e.ActionStart))
	}
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, crcTable))
}

func decodeEpochs(b []byte) ([]protocol.EpochStart, error) {
	if len(b) < 11 || binary.BigEndian.Uint32(b) != epochsMagic || b[4] != epochsVersion {
		return nil, fmt.Errorf("%w: bad header", ErrHistoryDamaged)
	}
	n := int(binary.BigEndian.Uint16(b[5:]))
	if len(b) != 7+24*n+4 {
		return nil, fmt.Errorf("%w: %d bytes for %d entries", ErrHistoryDamaged, len(b), n)
	}
	if crc32.Checksum(b[:len(b)-4], crcTable) != binary.BigEndian.Uint32(b[len(b)-4:]) {
		return nil, fmt.Errorf("%w: checksum mismatch", ErrHistoryDamaged)
	}
	h := make([]protocol.EpochStart, n)
	for i := range h {
		p := b[7+24*i:]
		h[i] = protocol.EpochStart{Epoch: binary.BigEndian.Uint64(p), MessageStart: int64(binary.BigEndian.Uint64(p[8:])),
			ActionStart: int64(binary.BigEndian.Uint64(p[16:]))}
	}
	if err := protocol.CheckEpochHistory(h); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrHistoryDamaged, err)
	}
	return h, nil
}

// LoadHistory reads dir's epoch history (empty when there is none yet). A
// damaged file is an error: without it a rejoining broker could keep
// records its group's master never had. Removing the file is safe when
// the group has another master: the copy then counts as written before
// any epoch, and the master's answer cuts it back to what they share
// (at worst everything, copied again).
func LoadHistory(dir string) ([]protocol.EpochStart, error) {
	b, err := os.ReadFile(filepath.Join(dir, HistoryFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("failover: read epoch history: %w", err)
	}
	return decodeEpochs(b)
}

// SaveHistory replaces dir's epoch history atomically.
func SaveHistory(dir string, h []protocol.EpochStart) error {
	if err := protocol.CheckEpochHistory(h); err != nil {
		return err
	}
	if err := fsutil.WriteFileAtomic(fsutil.OS, filepath.Join(dir, HistoryFile), encodeEpochs(h)); err != nil {
		return fmt.Errorf("failover: write epoch history: %w", err)
	}
	return nil
}

// LastEpoch is the epoch that wrote a history's newest records (0: none).
func LastEpoch(h []protocol.EpochStart) uint64 {
	if len(h) == 0 {
		return 0
	}
	return h[len(h)-1].Epoch
}

// WithEpoch returns h with epoch e starting at the given ends (h itself
// when e is its last epoch already).
func WithEpoch(h []protocol.EpochStart, e uint64, message, action int64) []protocol.EpochStart {
	if e == 0 || e <= LastEpoch(h) {
		return h
	}
	return append(append([]protocol.EpochStart(nil), h...), protocol.EpochStart{Epoch: e, MessageStart: message, ActionStart: action})
}

// Divergence returns where a slave's copy stops agreeing with its master's
// logs: both logs agree on what the newest epoch present in both histories
// wrote, up to where either history says a later epoch began (data before
// any epoch counts as epoch 0). A slave whose ends lie past the point cuts
// its logs back to it. The master's own newest epoch runs to its committed
// ends.
func Divergence(master, slave []protocol.EpochStart, masterMsg, masterAct int64) (message, action int64) {
	master, slave = fromZero(master), fromZero(slave)
	i, j := len(master)-1, len(slave)-1
	for master[i].Epoch != slave[j].Epoch {
		if master[i].Epoch > slave[j].Epoch {
			i--
		} else {
			j--
		}
	}
	message, action = masterMsg, masterAct
	if i+1 < len(master) {
		message, action = master[i+1].MessageStart, master[i+1].ActionStart
	}
	endMsg, endAct := int64(math.MaxInt64), int64(math.MaxInt64)
	if j+1 < len(slave) {
		endMsg, endAct = slave[j+1].MessageStart, slave[j+1].ActionStart
	}
	return min(message, endMsg), min(action, endAct)
}

// fromZero returns h starting with epoch 0 at offset 0.
func fromZero(h []protocol.EpochStart) []protocol.EpochStart {
	if len(h) > 0 && h[0].Epoch == 0 {
		return h
	}
	return append([]protocol.EpochStart{{}}, h...)
}

// HistoryEqual reports whether two histories are the same.
func HistoryEqual(a, b []protocol.EpochStart) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
