// FaultyFileSystem: a RocksDB FileSystem over the real one whose writes can be made to fail with
// "No space left on device", as a full disk fails them (ENOSPC surfaces in RocksDB as an IOError
// with subcode kNoSpace).
//
// While failing, every Append / PositionedAppend / Flush / Sync / Fsync of a writable file and
// every new writable file fails; reads and already written data are untouched. Clear the fault
// ("the operator freed space") and reopen the database to go on.
//
// Example:
//   auto fs = std::make_shared<FaultyFileSystem>();
//   std::unique_ptr<rocksdb::Env> env = FaultyFileSystem::NewEnv(fs);
//   LedgerOptions options;
//   options.env = env.get();          // must outlive the database
//   ... fs->FailWrites(true);         // the next ledger write fails
//
// Thread-safe: the flag is atomic; RocksDB's background threads see it.
#ifndef TESTS_MOCKS_FAULTY_FILE_SYSTEM_H_
#define TESTS_MOCKS_FAULTY_FILE_SYSTEM_H_

#include <atomic>
#include <memory>
#include <string>
#include <utility>

#include "rocksdb/env.h"
#include "rocksdb/file_system.h"
#include "rocksdb/io_status.h"

namespace tests {

class FaultyFileSystem : public rocksdb::FileSystemWrapper {
 public:
  FaultyFileSystem() : rocksdb::FileSystemWrapper(rocksdb::FileSystem::Default()) {}

  const char* Name() const override { return "FaultyFileSystem"; }

  // An Env over `fs` for rocksdb::Options::env; it keeps `fs` alive.
  static std::unique_ptr<rocksdb::Env> NewEnv(std::shared_ptr<FaultyFileSystem> fs) {
    return rocksdb::NewCompositeEnv(std::move(fs));
  }

  void FailWrites(bool fail) { fail_.store(fail); }
  // Writes refused since construction.
  int refused() const { return refused_.load(); }

  rocksdb::IOStatus NewWritableFile(const std::string& f, const rocksdb::FileOptions& options,
                                    std::unique_ptr<rocksdb::FSWritableFile>* r,
                                    rocksdb::IODebugContext* dbg) override {
    if (Failing()) return NoSpace(f);
    rocksdb::IOStatus s = target()->NewWritableFile(f, options, r, dbg);
    if (s.ok()) *r = std::make_unique<File>(std::move(*r), this, f);
    return s;
  }
  rocksdb::IOStatus ReopenWritableFile(const std::string& f, const rocksdb::FileOptions& options,
                                       std::unique_ptr<rocksdb::FSWritableFile>* r,
                                       rocksdb::IODebugContext* dbg) override {
    if (Failing()) return NoSpace(f);
    rocksdb::IOStatus s = target()->ReopenWritableFile(f, options, r, dbg);
    if (s.ok()) *r = std::make_unique<File>(std::move(*r), this, f);
    return s;
  }

 private:
  class File : public rocksdb::FSWritableFileOwnerWrapper {
   public:
    File(std::unique_ptr<rocksdb::FSWritableFile> f, FaultyFileSystem* fs, std::string name)
        : rocksdb::FSWritableFileOwnerWrapper(std::move(f)), fs_(fs), name_(std::move(name)) {}
    rocksdb::IOStatus Append(const rocksdb::Slice& data, const rocksdb::IOOptions& o,
                             rocksdb::IODebugContext* dbg) override {
      if (fs_->Failing()) return NoSpace(name_);
      return FSWritableFileOwnerWrapper::Append(data, o, dbg);
    }
    rocksdb::IOStatus Append(const rocksdb::Slice& data, const rocksdb::IOOptions& o,
                             const rocksdb::DataVerificationInfo& info,
                             rocksdb::IODebugContext* dbg) override {
      if (fs_->Failing()) return NoSpace(name_);
      return FSWritableFileOwnerWrapper::Append(data, o, info, dbg);
    }
    rocksdb::IOStatus PositionedAppend(const rocksdb::Slice& data, uint64_t offset,
                                       const rocksdb::IOOptions& o,
                                       rocksdb::IODebugContext* dbg) override {
      if (fs_->Failing()) return NoSpace(name_);
      return FSWritableFileOwnerWrapper::PositionedAppend(data, offset, o, dbg);
    }
    rocksdb::IOStatus PositionedAppend(const rocksdb::Slice& data, uint64_t offset,
                                       const rocksdb::IOOptions& o,
                                       const rocksdb::DataVerificationInfo& info,
                                       rocksdb::IODebugContext* dbg) override {
      if (fs_->Failing()) return NoSpace(name_);
      return FSWritableFileOwnerWrapper::PositionedAppend(data, offset, o, info, dbg);
    }
    rocksdb::IOStatus Flush(const rocksdb::IOOptions& o, rocksdb::IODebugContext* dbg) override {
      if (fs_->Failing()) return NoSpace(name_);
      return FSWritableFileOwnerWrapper::Flush(o, dbg);
    }
    rocksdb::IOStatus Sync(const rocksdb::IOOptions& o, rocksdb::IODebugContext* dbg) override {
      if (fs_->Failing()) return NoSpace(name_);
      return FSWritableFileOwnerWrapper::Sync(o, dbg);
    }
    rocksdb::IOStatus Fsync(const rocksdb::IOOptions& o, rocksdb::IODebugContext* dbg) override {
      if (fs_->Failing()) return NoSpace(name_);
      return FSWritableFileOwnerWrapper::Fsync(o, dbg);
    }

   private:
    FaultyFileSystem* const fs_;
    const std::string name_;
  };

  static rocksdb::IOStatus NoSpace(const std::string& file) {
    return rocksdb::IOStatus::NoSpace("While appending to file: " + file,
                                      "No space left on device (injected)");
  }
  bool Failing() {
    if (!fail_.load()) return false;
    refused_.fetch_add(1);
    return true;
  }

  std::atomic<bool> fail_{false};
  std::atomic<int> refused_{0};
};

}  // namespace tests

#endif  // TESTS_MOCKS_FAULTY_FILE_SYSTEM_H_
