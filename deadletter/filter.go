package deadletter

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/watchbot/watchbot/internal/setting"
)

// Filter selects messages. The zero Filter selects every message.
type Filter struct {
	// Body, when set, must match somewhere in the body.
	Body *regexp.Regexp
	// Attrs must all be present with exactly these values (String and Number values as
	// written, Binary values in base64). watchbot-reason, watchbot-source-queue and
	// watchbot-attempts are also found inside the packed watchbot-deadletter attribute.
	Attrs map[string]string
}

var matchAttr = setting.Ref(setting.MatchAttr)

// ParseFilter compiles a body's regular expression and attributes (K=V, repeatable): replay's
// --match-body and --match-attr.
func ParseFilter(body string, attrs []string) (Filter, error) {
	var f Filter
	if body != "" {
		re, err := regexp.Compile(body)
		if err != nil {
			return Filter{}, setting.Error{Reason: fmt.Sprintf("%s %q is not a valid regular expression", setting.Ref(setting.MatchBody), body), Err: err}
		}
		f.Body = re
	}
	for _, kv := range attrs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return Filter{}, setting.Refuse("", nil, fmt.Sprintf("%s %q: want NAME=VALUE", matchAttr, kv))
		}
		if f.Attrs == nil {
			f.Attrs = map[string]string{}
		}
		if prev, dup := f.Attrs[k]; dup && prev != v {
			return Filter{}, setting.Refuse("", nil, fmt.Sprintf("%s %s is given twice with different values (%q, %q): no message can match", matchAttr, k, prev, v))
		}
		f.Attrs[k] = v
	}
	return f, nil
}

// Match reports whether m is selected.
func (f Filter) Match(m Message) bool {
	if f.Body != nil && !f.Body.MatchString(m.Body) {
		return false
	}
	for k, want := range f.Attrs {
		if got, ok := m.attrValue(k); !ok || got != want {
			return false
		}
	}
	return true
}
