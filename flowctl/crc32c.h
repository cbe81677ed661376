// CRC32C (Castagnoli, polynomial 0x1EDC6F41, reflected 0x82F63B78): the checksum that frames
// every record of a spill segment file (flowctl/spill_segment.h).
//
// The implementation is table-driven "slicing by 8" (eight 256-entry tables built at compile
// time, one lookup per input byte, eight bytes per step): portable, no CPU flags needed. On x86-64
// CPUs with SSE4.2 (checked at run time) Crc32cExtend uses the `crc32` instruction instead, which
// computes the same function ~10x faster; Crc32cExtendPortable always uses the tables, and the
// tests check the two agree. Thread-safe: pure functions over constant tables.
//
//   uint32_t crc = flowctl::Crc32c("123456789", 9);          // 0xE3069283
//   crc = flowctl::Crc32cExtend(flowctl::Crc32c(a), b);       // == Crc32c(a + b)
#ifndef FLOWCTL_CRC32C_H_
#define FLOWCTL_CRC32C_H_

#include <cstddef>
#include <cstdint>

#include "absl/strings/string_view.h"

namespace flowctl {

// Returns the CRC32C of `crc`'s message followed by data[0, n). Start with crc = 0.
uint32_t Crc32cExtend(uint32_t crc, const void* data, size_t n);
// The same, always through the tables.
uint32_t Crc32cExtendPortable(uint32_t crc, const void* data, size_t n);
// True when Crc32cExtend uses the CPU's crc32 instruction.
bool Crc32cIsAccelerated();

inline uint32_t Crc32c(const void* data, size_t n) { return Crc32cExtend(0, data, n); }
inline uint32_t Crc32c(absl::string_view s) { return Crc32c(s.data(), s.size()); }
inline uint32_t Crc32cExtend(uint32_t crc, absl::string_view s) {
  return Crc32cExtend(crc, s.data(), s.size());
}

}  // namespace flowctl

#endif  // FLOWCTL_CRC32C_H_
