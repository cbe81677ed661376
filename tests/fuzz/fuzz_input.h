// FuzzInput: splits a fuzzer's byte string into typed values (a small FuzzedDataProvider that
// also builds with gcc, where libFuzzer's header is not installed), and QuietProtobufLogs.
//
// Reads from the front; once the input is used up every read returns zero / empty, so a target
// never needs to check for the end itself (loops still must be bounded by count).
// Not thread-safe; one per input.
//
//   tests::FuzzInput in(data, size);
//   while (!in.empty() && ops++ < 256) Apply(in.Byte() % 8, in.Bytes(in.Byte()));
#ifndef TESTS_FUZZ_FUZZ_INPUT_H_
#define TESTS_FUZZ_FUZZ_INPUT_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "google/protobuf/stubs/logging.h"

namespace tests {

// Protobuf logs an ERROR for every string field with invalid UTF-8 it parses; fuzzers parse
// millions. Call once per process (idempotent) to drop protobuf's log output.
inline void QuietProtobufLogs() {
  static const bool done = [] {
    google::protobuf::SetLogHandler(
        [](google::protobuf::LogLevel, const char*, int, const std::string&) {});
    return true;
  }();
  (void)done;
}

class FuzzInput {
 public:
  FuzzInput(const uint8_t* data, size_t size) : data_(data), size_(size) {}

  bool empty() const { return size_ == 0; }
  size_t remaining() const { return size_; }

  uint8_t Byte() {
    if (size_ == 0) return 0;
    --size_;
    return *data_++;
  }
  bool Bool() { return (Byte() & 1) != 0; }
  // Little-endian, `bytes` <= 8 bytes wide.
  uint64_t Uint(int bytes) {
    uint64_t v = 0;
    for (int i = 0; i < bytes; ++i) v |= static_cast<uint64_t>(Byte()) << (8 * i);
    return v;
  }
  // A value in [0, n) (0 when n == 0), from as few bytes as n needs.
  uint64_t Below(uint64_t n) {
    if (n <= 1) return 0;
    int bytes = 1;
    while (bytes < 8 && (n - 1) >> (8 * bytes) != 0) ++bytes;
    return Uint(bytes) % n;
  }
  // Up to `n` bytes (fewer at the end of the input).
  std::string Bytes(size_t n) {
    if (n > size_) n = size_;
    std::string s(reinterpret_cast<const char*>(data_), n);
    data_ += n;
    size_ -= n;
    return s;
  }
  // A length-prefixed string (1 or 2 length bytes), at most `max` bytes.
  std::string Blob(size_t max) {
    size_t n = max < 256 ? Byte() : static_cast<size_t>(Uint(2));
    return Bytes(n % (max + 1));
  }
  std::string Rest() { return Bytes(size_); }

 private:
  const uint8_t* data_;
  size_t size_;
};

}  // namespace tests

#endif  // TESTS_FUZZ_FUZZ_INPUT_H_
