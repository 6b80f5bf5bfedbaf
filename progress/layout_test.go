package progress

import (
	"strings"
	"testing"
)

func TestLocate(t *testing.T) {
	tests := []struct {
		part       int64
		shard, bit int
	}{
		{1, 0, 0},
		{2, 1, 0},
		{32, 31, 0},
		{33, 0, 1},
		{34, 1, 1},
		{131072, 31, 4095},
		{131073, 32, 0},
		{131105, 32, 1},
		{MaxParts, 76*32 + 31, 1203}, // 10,000,000 = 76·131072 + 38528; 38527 = 1203·32 + 31
	}
	for _, tt := range tests {
		if shard, bit := locate(tt.part); shard != tt.shard || bit != tt.bit {
			t.Errorf("locate(%d) = shard %d bit %d, want shard %d bit %d", tt.part, shard, bit, tt.shard, tt.bit)
		}
	}
}

// Every part of a job has a place of its own, inside the job's shards and inside a shard.
func TestLocateCoversEveryPartOnce(t *testing.T) {
	for _, total := range []int64{1, 31, 32, 33, 4096, block, block + 1, block + 40, 3*block + 5} {
		seen := map[[2]int]int64{}
		for p := int64(1); p <= total; p++ {
			shard, bit := locate(p)
			if shard < 0 || shard >= shardCount(total) || bit < 0 || bit >= shardBits {
				t.Fatalf("total %d: part %d at shard %d bit %d, outside %d shards of %d bits", total, p, shard, bit, shardCount(total), shardBits)
			}
			if q, dup := seen[[2]int{shard, bit}]; dup {
				t.Fatalf("total %d: parts %d and %d share shard %d bit %d", total, q, p, shard, bit)
			}
			seen[[2]int{shard, bit}] = p
		}
	}
}

func TestShardCount(t *testing.T) {
	tests := []struct {
		total int64
		want  int
	}{
		{0, 0},
		{1, 1},
		{31, 31},
		{32, 32},
		{100_000, 32},
		{block, 32},
		{block + 1, 33},
		{block + 32, 64},
		{MaxParts, 2464},
	}
	for _, tt := range tests {
		if got := shardCount(tt.total); got != tt.want {
			t.Errorf("shardCount(%d) = %d, want %d", tt.total, got, tt.want)
		}
	}
}

func TestShardKey(t *testing.T) {
	if got := shardKey(7); got != "shard#00007" {
		t.Errorf("shardKey(7) = %q", got)
	}
	if got := shardKey(shardCount(MaxParts) - 1); got != "shard#02463" {
		t.Errorf("the last shard's key is %q", got)
	}
}

func TestBitmap(t *testing.T) {
	var b bitmap
	if b.has(0) || b.count() != 0 {
		t.Fatal("an empty bitmap has bits")
	}
	b1 := b.with(9)
	if len(b1) != 2 || !b1.has(9) || b1.has(8) || b1.has(10) || b1.count() != 1 {
		t.Fatalf("with(9) = %08b", b1)
	}
	b2 := b1.with(0).with(shardBits - 1)
	if len(b2) != shardBits/8 || !b2.has(0) || !b2.has(9) || !b2.has(shardBits-1) || b2.count() != 3 {
		t.Fatalf("with(0).with(4095): len %d, count %d", len(b2), b2.count())
	}
	if b1.has(0) || b1.count() != 1 {
		t.Error("with changed the bitmap it was called on")
	}
	if b2.with(9).count() != 3 {
		t.Error("setting a set bit changed the count")
	}
}

func TestProgressOf(t *testing.T) {
	tests := []struct {
		done, total int64
		want        float64
	}{
		{0, 0, 0},
		{0, 10, 0},
		{1, 10, 0.1},
		{10, 10, 1},
		{999, 1000, 0.99}, // rounded down: 1 only when every part is done
		{1, 3, 0.33},
		{2, 3, 0.66},
		{29, 100, 0.29}, // watchbot-progress prints 0.28 (Math.floor(0.29 * 100) is 28)
		{MaxParts - 1, MaxParts, 0.99},
	}
	for _, tt := range tests {
		if got := progressOf(tt.done, tt.total); got != tt.want {
			t.Errorf("progressOf(%d, %d) = %v, want %v", tt.done, tt.total, got, tt.want)
		}
	}
}

func TestParseTable(t *testing.T) {
	tests := []struct {
		in      string
		want    Table
		wantErr string
	}{
		{in: "arn:aws:dynamodb:us-east-1:123456789012:table/my-stack-progress", want: Table{Name: "my-stack-progress", Region: "us-east-1"}},
		{in: "arn:aws-cn:dynamodb:cn-north-1:123456789012:table/t.1_x", want: Table{Name: "t.1_x", Region: "cn-north-1"}},
		{in: "arn:aws:dynamodb:local:1234567890:table/watchbot-progress", want: Table{Name: "watchbot-progress", Region: "local"}},
		{in: "progress", want: Table{Name: "progress"}},
		{in: "", wantErr: "neither a table name"},
		{in: "ab", wantErr: "neither a table name"},
		{in: "my table", wantErr: "neither a table name"},
		{in: "arn:aws:sqs:us-east-1:123456789012:queue", wantErr: "not a DynamoDB table ARN"},
		{in: "arn:aws:dynamodb:us-east-1:123456789012:table/t/stream/2024", wantErr: "not a DynamoDB table ARN"},
		{in: "arn:aws:dynamodb::123456789012:table/t", wantErr: "not a DynamoDB table ARN"},
	}
	for _, tt := range tests {
		got, err := ParseTable(tt.in)
		switch {
		case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
			t.Errorf("ParseTable(%q) = %v, want an error with %q", tt.in, err, tt.wantErr)
		case tt.wantErr == "" && (err != nil || got != tt.want):
			t.Errorf("ParseTable(%q) = %+v, %v; want %+v", tt.in, got, err, tt.want)
		}
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name    string
		err     error
		wantErr string
	}{
		{"job id", ValidateJobID("job-42"), ""},
		{"job id with spaces and unicode", ValidateJobID("tiles z14 — batch 7"), ""},
		{"empty job id", ValidateJobID(""), "no job id given"},
		{"job id not UTF-8", ValidateJobID("job\xff"), "not valid UTF-8"},
		{"job id too long", ValidateJobID(strings.Repeat("j", MaxJobIDBytes+1)), "1025 bytes long; at most 1024"},
		{"longest job id", ValidateJobID(strings.Repeat("j", MaxJobIDBytes)), ""},
		{"total 1", ValidateTotal(1), ""},
		{"total MaxParts", ValidateTotal(MaxParts), ""},
		{"total 0", ValidateTotal(0), "total 0 is outside 1..10000000"},
		{"negative total", ValidateTotal(-3), "outside"},
		{"total above MaxParts", ValidateTotal(MaxParts + 1), "outside"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.wantErr == "" && tt.err != nil || tt.wantErr != "" && (tt.err == nil || !strings.Contains(tt.err.Error(), tt.wantErr)) {
				t.Fatalf("got %v, want %q", tt.err, tt.wantErr)
			}
		})
	}
}

// ParseTable never panics, and what it accepts is a legal table name, with a region exactly
// when it was given an ARN.
func FuzzParseTable(f *testing.F) {
	for _, s := range []string{"progress", "arn:aws:dynamodb:us-east-1:123456789012:table/t-1", "arn:aws:dynamodb:::table/x", "arn:", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		table, err := ParseTable(s)
		if err != nil {
			return
		}
		if !tableName.MatchString(table.Name) || (table.Region != "") != strings.HasPrefix(s, "arn:") {
			t.Fatalf("ParseTable(%q) = %+v", s, table)
		}
	})
}
