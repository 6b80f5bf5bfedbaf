// Package layout holds no code: its test checks which way the module's imports point, so
// that the template generator never depends on the supervisor, and the leaf packages that
// both share stay leaves.
package layout
