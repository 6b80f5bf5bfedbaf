//go:build race

package progress

// The race detector slows each call of a test tenfold; tests that make many (for scale, not
// for interleavings, which a smaller count exercises as well) make fewer under it.
func init() { raceDetector = true }
