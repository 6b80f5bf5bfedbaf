package payload

import (
	"path/filepath"
	"testing"
)

// FuzzParse: Parse never panics on any body, and whatever it accepts encodes to a body it
// reads back as the same pointer.
func FuzzParse(f *testing.F) {
	names, _ := filepath.Glob("testdata/*.json")
	for _, name := range names {
		f.Add(readFixture(f, filepath.Base(name)).Body)
	}
	f.Add(Pointer{"b", "k"}.Encode())
	f.Add(`["com.amazon.sqs.javamessaging.MessageS3Pointer", {"s3BucketName": "b", "s3Key": "k"}]`)
	f.Add(`[1,2]`)
	f.Add(`{"Message":"x"}`)
	f.Fuzz(func(t *testing.T, body string) {
		p, err := Parse(body)
		if err != nil {
			return
		}
		if p.Bucket == "" || p.Key == "" {
			t.Fatalf("Parse(%q) accepted an empty name: %+v", body, p)
		}
		back, err := Parse(p.Encode())
		if err != nil || back != p {
			t.Fatalf("round trip of %+v: %+v, %v", p, back, err)
		}
	})
}
