// Package layout holds no code: its test checks which way the module's imports point, so
// that the template generator never depends on the supervisor, the leaf packages that both
// share stay leaves, and the test tools of internal/testing never reach the product while
// every other package under internal/ is a helper the product uses.
package layout
