package dedupe

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"unicode/utf8"
)

// The forms of --dedupe-key.
const (
	// MessageIDKey keys a message by its SQS MessageId: it suppresses redeliveries of one
	// message, not a producer's second send of the same job.
	MessageIDKey = "message-id"
	// AttributeKeyPrefix, followed by a message attribute's name, keys a message by that
	// attribute's value: a producer's idempotency key.
	AttributeKeyPrefix = "attr:"
)

// KeySource is where a message's key comes from (--dedupe-key).
type KeySource struct {
	// Attribute is the message attribute holding the key; "" means the message id.
	Attribute string
}

// maxAttributeName is SQS's longest message attribute name.
const maxAttributeName = 256

// ParseKeySource reads --dedupe-key: "message-id" (or "", its default), or "attr:NAME".
func ParseKeySource(s string) (KeySource, error) {
	if s == "" || s == MessageIDKey {
		return KeySource{}, nil
	}
	name, ok := strings.CutPrefix(s, AttributeKeyPrefix)
	if !ok {
		return KeySource{}, fmt.Errorf("(%q) must be %s or %sNAME, NAME a message attribute", s, MessageIDKey, AttributeKeyPrefix)
	}
	if name == "" || len(name) > maxAttributeName || strings.IndexFunc(name, notAttributeChar) >= 0 {
		return KeySource{}, fmt.Errorf("(%q): %q is not a message attribute name (1 to %d letters, digits, _ - .)", s, name, maxAttributeName)
	}
	return KeySource{Attribute: name}, nil
}

// notAttributeChar reports a character SQS does not allow in a message attribute name.
func notAttributeChar(r rune) bool {
	return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-' || r == '.')
}

// String returns the source as --dedupe-key spells it.
func (k KeySource) String() string {
	if k.Attribute == "" {
		return MessageIDKey
	}
	return AttributeKeyPrefix + k.Attribute
}

// maxPlainKey is the longest key (with its scope) stored as it is. DynamoDB allows a
// partition key of 2,048 bytes; a longer key, or one that is not UTF-8, is stored as its
// SHA-256, which also keeps every record within one write unit.
const maxPlainKey = 512

// recordKey is the KeyAttribute of key's record: the scope (the queue's name), a slash and
// the key, or its SHA-256 when that is too long to store as it is.
func recordKey(scope, key string) string {
	k := scope + "/" + key
	if len(k) <= maxPlainKey && utf8.ValidString(k) {
		return k
	}
	sum := sha256.Sum256([]byte(key))
	return scope + "/sha256:" + hex.EncodeToString(sum[:])
}
