package worker

import (
	"bufio"
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"
)

// TestJSONEscaper: the streaming escaper writes what encoding/json writes for the same
// string, however the bytes are split between writes.
func TestJSONEscaper(t *testing.T) {
	samples := []string{
		"", "plain", `quote " backslash \ slash /`, "tab\tnl\ncr\r\x00\x01\x1f\x7f", "backspace\b formfeed\f",
		"<html>&amp;</html>", "é ü 日本語 🎉", "line\u2028para\u2029", "\xff\xfe invalid \xc3", "\xe2\x82", "\xf0\x9f\x8e",
		"é\xe2é", "\xe2\xc3\xa9", "\xf0\x9fA",
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 300 {
		b := make([]byte, rng.IntN(40))
		for i := range b {
			const alphabet = "a\"\\\n\b\x00\xc3\xa9\xe2\x80\xa8\xf0\x9f\x8e\x89\xff"
			b[i] = alphabet[rng.IntN(len(alphabet))]
		}
		samples = append(samples, string(b))
	}
	for _, s := range samples {
		var want bytes.Buffer
		enc := json.NewEncoder(&want)
		enc.SetEscapeHTML(false)
		_ = enc.Encode(s)
		wantInner := strings.TrimSuffix(strings.TrimPrefix(strings.TrimSuffix(want.String(), "\n"), `"`), `"`)
		for _, chunk := range []int{1, 2, 3, 5, 64} {
			var got bytes.Buffer
			bw := bufio.NewWriter(&got)
			e := &jsonEscaper{w: bw}
			for i := 0; i < len(s); i += chunk {
				e.Write([]byte(s[i:min(i+chunk, len(s))]))
			}
			e.flush()
			bw.Flush()
			if got.String() != wantInner {
				t.Fatalf("%q in writes of %d: got %s, want %s", s, chunk, got.String(), wantInner)
			}
		}
	}
}
