#include "partitions/rocksdb_logger.h"

#include <cstdarg>
#include <cstdio>
#include <utility>

#include "glog/logging.h"

namespace partitions {
namespace {

class GlogRocksDbLogger final : public rocksdb::Logger {
 public:
  explicit GlogRocksDbLogger(std::string name)
      : rocksdb::Logger(rocksdb::InfoLogLevel::WARN_LEVEL), name_(std::move(name)) {}

  void Logv(const char* format, va_list ap) override {
    Logv(rocksdb::InfoLogLevel::INFO_LEVEL, format, ap);
  }

  void Logv(const rocksdb::InfoLogLevel level, const char* format, va_list ap) override {
    if (level < GetInfoLogLevel()) return;
    char buf[1024];
    va_list copy;
    va_copy(copy, ap);
    const int n = std::vsnprintf(buf, sizeof(buf), format, copy);
    va_end(copy);
    if (n < 0) return;
    if (level >= rocksdb::InfoLogLevel::ERROR_LEVEL) {
      LOG(ERROR) << "rocksdb " << name_ << ": " << buf;
    } else if (level >= rocksdb::InfoLogLevel::WARN_LEVEL) {
      LOG(WARNING) << "rocksdb " << name_ << ": " << buf;
    } else {
      LOG(INFO) << "rocksdb " << name_ << ": " << buf;
    }
  }

 private:
  const std::string name_;
};

}  // namespace

std::shared_ptr<rocksdb::Logger> NewGlogRocksDbLogger(std::string name) {
  return std::make_shared<GlogRocksDbLogger>(std::move(name));
}

}  // namespace partitions
