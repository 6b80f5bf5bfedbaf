package progress

import (
	"fmt"
	"math/bits"
)

// How parts map to shard items. A job's parts are spread over shards of at most shardBits parts,
// each a bitmap with one bit per part. Parts go round-robin over stripes shards, so workers
// completing neighbouring parts at the same time write different items instead of contending
// for one; a job of more than a block of parts uses a further stripes shards per block:
//
//	part p (1-based)    block b = (p-1) / block     r = (p-1) % block
//	shard               b·stripes + r % stripes
//	bit in the shard    r / stripes
//
//	parts  1  2 … 32  33  34 … 131072  131073 …
//	shard  0  1 … 31   0   1 …     31      32 …
//	bit    0  0 …  0   1   1 …   4095       0 …
//
// A part's shard depends on the part alone, not on the job's total, so one BatchGetItem reads
// the job item and the part's shard together.
const (
	// shardBits is the number of parts of a shard: a bitmap of 512 bytes, so that a shard item
	// stays within DynamoDB's 1 KB write unit for job ids of up to 450 bytes.
	shardBits = 4096
	// stripes is the number of shards consecutive parts are spread over.
	stripes = 32
	// block is the number of parts a group of stripes shards holds.
	block = stripes * shardBits
)

// locate returns the shard holding part (1-based) and the part's bit in that shard.
func locate(part int64) (shard, bit int) {
	b, r := (part-1)/block, (part-1)%block
	return int(b)*stripes + int(r%stripes), int(r / stripes)
}

// shardCount returns how many shards a job of total parts uses: one more than the shard of
// its highest part, or all stripes shards of its last block when that block has that many
// parts. It is the length of the job item's counted list.
func shardCount(total int64) int {
	if total <= 0 {
		return 0
	}
	full, rest := (total-1)/block, (total-1)%block+1
	return int(full)*stripes + int(min(rest, stripes))
}

// shardKey is the sort key of shard i. Zero-padded, so a Query lists a job's shards in order.
func shardKey(i int) string { return fmt.Sprintf("%s%05d", shardPrefix, i) }

// bitmap is a shard's parts, bit i of byte i/8 (least significant first) for the shard's bit
// i. It is as long as its highest set bit needs; a missing byte is all zeros.
type bitmap []byte

// has reports whether bit i is set.
func (b bitmap) has(i int) bool {
	return i/8 < len(b) && b[i/8]&(1<<(i%8)) != 0
}

// with returns a copy of b with bit i set, grown as needed.
func (b bitmap) with(i int) bitmap {
	out := make(bitmap, max(len(b), i/8+1))
	copy(out, b)
	out[i/8] |= 1 << (i % 8)
	return out
}

// count returns the number of bits set.
func (b bitmap) count() int {
	n := 0
	for _, c := range b {
		n += bits.OnesCount8(c)
	}
	return n
}
