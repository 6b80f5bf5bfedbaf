package payload

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"
)

// fixture is one file of testdata/ (see testdata/README.md).
type fixture struct {
	Body              string `json:"Body"`
	MessageAttributes map[string]struct {
		DataType    string `json:"DataType"`
		StringValue string `json:"StringValue"`
	} `json:"MessageAttributes"`
}

func readFixture(t testing.TB, name string) fixture {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	var f fixture
	if err := json.Unmarshal(raw, &f); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return f
}

func TestFixtures(t *testing.T) {
	names, _ := filepath.Glob("testdata/*.json")
	if len(names) < 4 {
		t.Fatalf("fixtures: %v", names)
	}
	for _, path := range names {
		name := filepath.Base(path)
		t.Run(name, func(t *testing.T) {
			f := readFixture(t, name)
			attrs := map[string]string{}
			for n, v := range f.MessageAttributes {
				if v.DataType != SizeAttributeType {
					t.Errorf("%s has data type %q", n, v.DataType)
				}
				attrs[n] = v.StringValue
			}
			size := SizeOf(attrs)
			if !size.Present() || size.Bytes != 262145 {
				t.Errorf("SizeOf = %+v", size)
			}
			p, ok, err := Detect(f.Body, size)
			if !ok || err != nil || p.Bucket != "extended-client-fixtures" || p.Key == "" {
				t.Fatalf("Detect = %+v, %v, %v", p, ok, err)
			}
			if strings.Contains(name, "legacy") != (size.Name == LegacySizeAttribute) {
				t.Errorf("size attribute %q in %s", size.Name, name)
			}
		})
	}
}

// TestEncodeIsJavas: what watchbot writes is byte for byte what the Java library writes.
func TestEncodeIsJavas(t *testing.T) {
	f := readFixture(t, "java.json")
	p, err := Parse(f.Body)
	if err != nil {
		t.Fatal(err)
	}
	if got := p.Encode(); got != f.Body {
		t.Errorf("Encode =\n%s\nwant\n%s", got, f.Body)
	}
	odd := Pointer{Bucket: "b", Key: `a/<&>"\` + "\u00e9\n"}
	back, err := Parse(odd.Encode())
	if err != nil || back != odd {
		t.Errorf("round trip of %q: %+v, %v", odd.Key, back, err)
	}
	if strings.Contains(odd.Encode(), `\u003c`) {
		t.Errorf("Encode escapes HTML characters, Jackson does not: %s", odd.Encode())
	}
}

func TestParse(t *testing.T) {
	tests := []struct {
		name, body string
		want       Pointer
		err        string // "" when it parses
	}{
		{"java", `["software.amazon.payloadoffloading.PayloadS3Pointer",{"s3BucketName":"b","s3Key":"k"}]`, Pointer{"b", "k"}, ""},
		{"spaces and newline", " [ \"com.amazon.sqs.javamessaging.MessageS3Pointer\" , {\"s3Key\": \"k\", \"s3BucketName\": \"b\"} ]\n", Pointer{"b", "k"}, ""},
		{"unknown fields ignored", `["software.amazon.payloadoffloading.PayloadS3Pointer",{"s3BucketName":"b","s3Key":"k","x":1}]`, Pointer{"b", "k"}, ""},
		{"key with slashes", `["software.amazon.payloadoffloading.PayloadS3Pointer",{"s3BucketName":"b","s3Key":"a/b/c.json"}]`, Pointer{"b", "a/b/c.json"}, ""},
		{"object", `{"s3BucketName":"b","s3Key":"k"}`, Pointer{}, "not a JSON array"},
		{"plain text", `hello`, Pointer{}, "not a JSON array"},
		{"empty", ``, Pointer{}, "not a JSON array"},
		{"one element", `["software.amazon.payloadoffloading.PayloadS3Pointer"]`, Pointer{}, "1 elements"},
		{"three elements", `["software.amazon.payloadoffloading.PayloadS3Pointer",{"s3BucketName":"b","s3Key":"k"},1]`, Pointer{}, "3 elements"},
		{"other class", `["com.example.Pointer",{"s3BucketName":"b","s3Key":"k"}]`, Pointer{}, "unknown pointer class"},
		{"class not a string", `[1,{"s3BucketName":"b","s3Key":"k"}]`, Pointer{}, "not a class name"},
		{"second not an object", `["software.amazon.payloadoffloading.PayloadS3Pointer",["b","k"]]`, Pointer{}, "not an object"},
		{"no bucket", `["software.amazon.payloadoffloading.PayloadS3Pointer",{"s3Key":"k"}]`, Pointer{}, "no s3BucketName"},
		{"empty key", `["software.amazon.payloadoffloading.PayloadS3Pointer",{"s3BucketName":"b","s3Key":""}]`, Pointer{}, "no s3Key"},
		{"bucket a number", `["software.amazon.payloadoffloading.PayloadS3Pointer",{"s3BucketName":5,"s3Key":"k"}]`, Pointer{}, "cannot unmarshal"},
		{"truncated", `["software.amazon.payloadoffloading.PayloadS3Pointer",{"s3BucketName":"b"`, Pointer{}, "unexpected end"},
		{"an array of records", `[{"id":1},{"id":2}]`, Pointer{}, "not a class name"},
		{"too long", `[` + strings.Repeat(" ", maxPointerLen) + `]`, Pointer{}, "too long"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Parse(tt.body)
			if tt.err == "" {
				if err != nil || got != tt.want {
					t.Fatalf("Parse = %+v, %v; want %+v", got, err, tt.want)
				}
				return
			}
			if err == nil || !errors.Is(err, ErrNotPointer) || !strings.Contains(err.Error(), tt.err) {
				t.Fatalf("Parse error = %v, want one saying %q", err, tt.err)
			}
		})
	}
}

func TestDetect(t *testing.T) {
	pointer := Pointer{"b", "k"}.Encode()
	tests := []struct {
		name    string
		body    string
		attrs   map[string]string
		pointer bool
		err     bool
	}{
		{"pointer with attribute", pointer, map[string]string{SizeAttribute: "10"}, true, false},
		{"pointer with legacy attribute", pointer, map[string]string{LegacySizeAttribute: "10"}, true, false},
		{"pointer without attribute", pointer, nil, true, false},
		{"ordinary body", `{"job":1}`, nil, false, false},
		{"look-alike without attribute", `["software.amazon.payloadoffloading.PayloadS3Pointer",{}]`, nil, false, false},
		{"look-alike with attribute", `["software.amazon.payloadoffloading.PayloadS3Pointer",{}]`, map[string]string{SizeAttribute: "10"}, false, true},
		{"plain body with attribute", `hello`, map[string]string{LegacySizeAttribute: "5"}, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, ok, err := Detect(tt.body, SizeOf(tt.attrs))
			if ok != tt.pointer || (err != nil) != tt.err {
				t.Fatalf("Detect = %v, %v", ok, err)
			}
			if err != nil && !strings.Contains(err.Error(), "body is not a pointer") {
				t.Errorf("error %q does not say why", err)
			}
		})
	}
}

func TestSizeOf(t *testing.T) {
	tests := []struct {
		attrs map[string]string
		want  Size
	}{
		{nil, Size{}},
		{map[string]string{"other": "1"}, Size{}},
		{map[string]string{SizeAttribute: "300000"}, Size{SizeAttribute, 300000}},
		{map[string]string{LegacySizeAttribute: "7"}, Size{LegacySizeAttribute, 7}},
		{map[string]string{SizeAttribute: "1", LegacySizeAttribute: "2"}, Size{SizeAttribute, 1}},
		{map[string]string{SizeAttribute: "lots"}, Size{SizeAttribute, -1}},
		{map[string]string{SizeAttribute: "-3"}, Size{SizeAttribute, -1}},
	}
	for i, tt := range tests {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			if got := SizeOf(tt.attrs); got != tt.want {
				t.Errorf("SizeOf(%v) = %+v, want %+v", tt.attrs, got, tt.want)
			}
		})
	}
}

func TestURI(t *testing.T) {
	p := Pointer{"bucket", "a/b c"}
	if p.URI() != "s3://bucket/a/b c" {
		t.Errorf("URI = %q", p.URI())
	}
	back, err := ParseURI(p.URI())
	if err != nil || back != p {
		t.Errorf("ParseURI = %+v, %v", back, err)
	}
	for _, bad := range []string{"", "s3://", "s3://b", "s3://b/", "s3:///k", "https://b/k"} {
		if _, err := ParseURI(bad); err == nil {
			t.Errorf("ParseURI(%q) accepted", bad)
		}
	}
}

func TestNewKey(t *testing.T) {
	uuid4 := regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)
	seen := map[string]bool{}
	for range 100 {
		k := NewKey()
		if !uuid4.MatchString(k) || seen[k] {
			t.Fatalf("NewKey = %q (seen before: %v)", k, seen[k])
		}
		seen[k] = true
	}
}

func TestPermanent(t *testing.T) {
	status := func(code int) error {
		return &awshttp.ResponseError{ResponseError: &smithyhttp.ResponseError{
			Response: &smithyhttp.Response{Response: &http.Response{StatusCode: code}},
			Err:      errors.New("x"),
		}}
	}
	tests := []struct {
		name      string
		err       error
		permanent bool
	}{
		{"nil", nil, false},
		{"NoSuchKey", &smithy.GenericAPIError{Code: "NoSuchKey"}, true},
		{"AccessDenied", fmt.Errorf("get: %w", &smithy.GenericAPIError{Code: "AccessDenied"}), true},
		{"NoSuchBucket", &smithy.GenericAPIError{Code: "NoSuchBucket"}, true},
		{"SlowDown", &smithy.GenericAPIError{Code: "SlowDown"}, false},
		{"InternalError", &smithy.GenericAPIError{Code: "InternalError"}, false},
		{"ExpiredToken", &smithy.GenericAPIError{Code: "ExpiredToken"}, false},
		{"403 without a code", status(403), true},
		{"404 without a code", status(404), true},
		{"503", status(503), false},
		{"500", status(500), false},
		{"connection", errors.New("connection reset by peer"), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reason, got := Permanent(tt.err)
			if got != tt.permanent || got == (reason == "") {
				t.Errorf("Permanent = %q, %v", reason, got)
			}
		})
	}
}
