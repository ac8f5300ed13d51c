package testenv

import "runtime"

// HeapInUse is the heap in use after a full collection: what memory
// benchmarks (the seen-set's, the API's read model's) divide by what they
// hold.
func HeapInUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}
